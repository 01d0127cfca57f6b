#include "server/markup/span_transfer.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "model/error.h"

namespace nmt::markup {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "markup: " + message);
}

std::string show(ByteRange r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

// A target token and the source token it came from.
struct Unit {
  ByteRange target;
  ByteRange source;
  int leaf = -1;  // the deepest span the source token lies in (-1: none)
};

// children[p + 1]: the spans whose parent is p, in index order.
std::vector<std::vector<int>> children_of(const std::vector<Span>& spans) {
  std::vector<std::vector<int>> children(spans.size() + 1);
  for (std::size_t i = 0; i < spans.size(); ++i) children[spans[i].parent + 1].push_back(static_cast<int>(i));
  return children;
}

void check_spans(std::string_view source, const std::vector<Span>& spans,
                 const std::vector<std::vector<int>>& children) {
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    const std::string name = "span " + std::to_string(i);
    if (s.range.begin > s.range.end || s.range.end > source.size())
      invalid(name + " " + show(s.range) + " lies outside the source text of " +
              std::to_string(source.size()) + " bytes");
    if (s.parent < -1 || s.parent >= static_cast<int>(i))
      invalid(name + " has parent " + std::to_string(s.parent) +
              ", which is not an earlier span (or -1)");
    if (s.parent >= 0) {
      const ByteRange p = spans[s.parent].range;
      if (s.range.begin < p.begin || s.range.end > p.end)
        invalid(name + " " + show(s.range) + " leaves its parent span " +
                std::to_string(s.parent) + " " + show(p));
    }
  }
  for (const auto& siblings : children) {
    for (std::size_t a = 0; a < siblings.size(); ++a) {
      for (std::size_t b = a + 1; b < siblings.size(); ++b) {
        const ByteRange x = spans[siblings[a]].range, y = spans[siblings[b]].range;
        // Touching is fine, an empty span at the edge of another too; inside is not.
        const bool overlap = x.begin < y.end && y.begin < x.end;
        const bool empty_inside = (x.begin == x.end && y.begin < x.begin && x.begin < y.end) ||
                                  (y.begin == y.end && x.begin < y.begin && y.begin < x.end);
        if (overlap || empty_inside)
          invalid("sibling spans " + std::to_string(siblings[a]) + " " + show(x) + " and " +
                  std::to_string(siblings[b]) + " " + show(y) + " overlap");
      }
    }
  }
}

// The deepest span a source token lies in: from the top, into the child that holds at least
// half of what the node holds of the token (a token may straddle a tag boundary:
// "<b>un</b>done" leaves "undone" outside, "<b>und</b>one" puts it inside), until none.
int leaf_of(ByteRange token, const std::vector<Span>& spans,
            const std::vector<std::vector<int>>& children) {
  int node = -1;
  std::size_t held = token.end - token.begin;  // bytes of the token inside `node`
  for (;;) {
    int best = -1;
    std::size_t best_overlap = 0;
    for (int c : children[node + 1]) {
      const ByteRange r = spans[c].range;
      if (token.begin == token.end) {
        if (r.begin < token.begin && token.begin < r.end) best = c;
        continue;
      }
      const std::size_t lo = std::max(r.begin, token.begin), hi = std::min(r.end, token.end);
      if (hi > lo && hi - lo > best_overlap && 2 * (hi - lo) >= held) {
        best_overlap = hi - lo;
        best = c;
      }
    }
    if (best < 0) return node;
    node = best;
    held = best_overlap;
  }
}

std::vector<Unit> units_of(std::string_view source, std::string_view target,
                           const std::vector<AlignmentLink>& links) {
  std::vector<Unit> units;
  for (std::size_t i = 0; i < links.size(); ++i) {
    const AlignmentLink& l = links[i];
    if (l.source.begin > l.source.end || l.source.end > source.size())
      invalid("alignment " + std::to_string(i) + ": source range " + show(l.source) +
              " lies outside the source text of " + std::to_string(source.size()) + " bytes");
    if (l.target.begin > l.target.end || l.target.end > target.size())
      invalid("alignment " + std::to_string(i) + ": target range " + show(l.target) +
              " lies outside the target text of " + std::to_string(target.size()) + " bytes");
    if (l.target.begin < l.target.end) units.push_back({l.target, l.source, -1});
  }
  // The first pair of a target token counts: stable sort, then drop later duplicates.
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    return std::tie(a.target.begin, a.target.end) < std::tie(b.target.begin, b.target.end);
  });
  units.erase(std::unique(units.begin(), units.end(),
                          [](const Unit& a, const Unit& b) { return a.target == b.target; }),
              units.end());
  for (std::size_t i = 1; i < units.size(); ++i)
    if (units[i].target.begin < units[i - 1].target.end)
      invalid("alignment target tokens " + show(units[i - 1].target) + " and " +
              show(units[i].target) + " overlap");
  return units;
}

// Letters and digits (any byte of a multi-byte UTF-8 character counts as one): what a tag is
// not put inside of. Punctuation is not: "<b>Schnee</b>." stays so.
bool word_byte(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z');
}

bool blank(std::string_view text) {
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f') return false;
  return true;
}

// Where a span without target tokens of its own goes in its parent's range: after the target
// token of the last source token before it, else before the one of the first source token
// after it, else at the parent's start; on the same side of the whitespace next to that
// token as in the source ("Use <code>ls</code>" keeps its space before the code); never
// strictly inside a sibling's run.
std::size_t place_empty(std::string_view source, std::string_view target, std::size_t source_pos,
                        ByteRange parent, const std::vector<Unit>& units, std::size_t lo,
                        std::size_t hi, const std::vector<ByteRange>& runs) {
  std::size_t pos = parent.begin;
  const Unit* before = nullptr;
  for (std::size_t u = lo; u < hi; ++u) {
    const Unit& unit = units[u];
    if (unit.source.end <= source_pos &&
        (!before || unit.source.end > before->source.end ||
         (unit.source.end == before->source.end && unit.target.end > before->target.end)))
      before = &unit;
  }
  const Unit* after = nullptr;
  if (!before) {
    for (std::size_t u = lo; u < hi; ++u) {
      const Unit& unit = units[u];
      if (unit.source.begin >= source_pos && (!after || unit.source.begin < after->source.begin))
        after = &unit;
    }
  }
  if (before) {
    pos = before->target.end;
    const std::string_view gap = source.substr(before->source.end, source_pos - before->source.end);
    if (!gap.empty() && blank(gap))
      while (pos < parent.end && blank(target.substr(pos, 1))) ++pos;
  } else if (after) {
    pos = after->target.begin;
    const std::string_view gap = source.substr(source_pos, after->source.begin - source_pos);
    if (!gap.empty() && blank(gap))
      while (pos > parent.begin && blank(target.substr(pos - 1, 1))) --pos;
  }
  // Not inside a word: to its end (within the parent, before a sibling's run).
  std::size_t stop = parent.end;
  for (ByteRange r : runs)
    if (r.begin >= pos && r.begin < stop) stop = r.begin;
  while (pos > parent.begin && pos < stop && word_byte(target[pos - 1]) && word_byte(target[pos])) ++pos;
  for (ByteRange r : runs) {
    if (r.begin < pos && pos < r.end) pos = (pos - r.begin < r.end - pos) ? r.begin : r.end;
  }
  return pos;
}

}  // namespace

Apart spaces_beside(std::string_view target, std::size_t pos, Apart source) {
  if (pos > target.size())
    invalid("a span at " + std::to_string(pos) + " lies outside the target text of " +
            std::to_string(target.size()) + " bytes");
  Apart out;
  out.before = source.before && pos > 0 && !blank(target.substr(pos - 1, 1));
  out.after = source.after && pos < target.size() && !blank(target.substr(pos, 1));
  return out;
}

std::vector<int> children_in_order(const std::vector<Span>& spans, int parent) {
  std::vector<int> out;
  for (std::size_t i = 0; i < spans.size(); ++i)
    if (spans[i].parent == parent) out.push_back(static_cast<int>(i));
  std::sort(out.begin(), out.end(), [&](int a, int b) {
    return std::tie(spans[a].range.begin, spans[a].range.end, a) <
           std::tie(spans[b].range.begin, spans[b].range.end, b);
  });
  return out;
}

std::vector<Span> transfer_spans(std::string_view source, const std::vector<Span>& spans,
                                 std::string_view target,
                                 const std::vector<AlignmentLink>& links) {
  const auto children = children_of(spans);
  check_spans(source, spans, children);
  std::vector<Unit> units = units_of(source, target, links);
  for (Unit& u : units) u.leaf = leaf_of(u.source, spans, children);

  std::vector<int> depth(spans.size(), 0);
  for (std::size_t i = 0; i < spans.size(); ++i)
    depth[i] = spans[i].parent < 0 ? 1 : depth[spans[i].parent] + 1;

  std::vector<Span> out = spans;
  // Parents come before their children (parent < index), so one pass in index order places
  // every span inside a parent already placed. Node -1 is the whole target text.
  for (int node = -1; node < static_cast<int>(spans.size()); ++node) {
    const auto& kids = children[node + 1];
    if (kids.empty()) continue;
    const ByteRange range = node < 0 ? ByteRange{0, target.size()} : out[node].range;
    const int node_depth = node < 0 ? 0 : depth[node];
    // The target tokens inside the range (units are sorted and do not overlap).
    const auto first_in = std::lower_bound(units.begin(), units.end(), range.begin,
                                           [](const Unit& u, std::size_t b) { return u.target.begin < b; });
    std::size_t lo = first_in - units.begin(), hi = lo;
    while (hi < units.size() && units[hi].target.end <= range.end) ++hi;

    // Each token's label at this level: the child of `node` on the way to its leaf span.
    std::vector<std::vector<std::size_t>> hits(kids.size());
    for (std::size_t u = lo; u < hi; ++u) {
      int s = units[u].leaf;
      if (s < 0 || depth[s] <= node_depth) continue;
      while (depth[s] > node_depth + 1) s = spans[s].parent;
      if (spans[s].parent != node) continue;
      const auto k = std::find(kids.begin(), kids.end(), s) - kids.begin();
      hits[k].push_back(u);
    }
    // A child's run starts at its first token and ends at its last token before the next
    // child's first token: contiguous, disjoint runs in the order the tokens come.
    std::vector<std::size_t> order;
    for (std::size_t k = 0; k < kids.size(); ++k)
      if (!hits[k].empty()) order.push_back(k);
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return hits[a].front() < hits[b].front(); });
    std::vector<ByteRange> runs;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const auto& h = hits[order[i]];
      std::size_t last = h.front();
      const std::size_t limit = i + 1 < order.size() ? hits[order[i + 1]].front() : hi;
      for (std::size_t u : h)
        if (u < limit) last = u;
      runs.push_back({units[h.front()].target.begin, units[last].target.end});
    }
    // A run that starts or ends inside a word (a subword token of it) takes the whole word,
    // as far as its neighbours' runs and its parent allow: a tag around "Fahr" of
    // "Fahrrad" covers "Fahrrad".
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const std::size_t floor = i ? runs[i - 1].end : range.begin;
      const std::size_t ceiling = i + 1 < runs.size() ? runs[i + 1].begin : range.end;
      while (runs[i].begin > floor && word_byte(target[runs[i].begin - 1]) && word_byte(target[runs[i].begin]))
        --runs[i].begin;
      while (runs[i].end < ceiling && word_byte(target[runs[i].end - 1]) && word_byte(target[runs[i].end]))
        ++runs[i].end;
      out[kids[order[i]]].range = runs[i];
    }
    for (std::size_t k = 0; k < kids.size(); ++k) {
      if (!hits[k].empty()) continue;
      const std::size_t pos =
          place_empty(source, target, spans[kids[k]].range.begin, range, units, lo, hi, runs);
      out[kids[k]].range = {pos, pos};
    }
  }
  return out;
}

}  // namespace nmt::markup
