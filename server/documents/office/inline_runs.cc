#include "server/documents/office/inline_runs.h"

#include <algorithm>
#include <climits>

namespace nmt::server {
namespace {

using Kind = InlineItem::Kind;

// The nearest word boundary (a text edge, or just after a space) to `pos` in `text`.
size_t word_boundary(const std::string& text, size_t pos) {
  pos = std::min(pos, text.size());
  for (size_t d = 0; d <= text.size(); ++d) {
    for (size_t p : {pos - std::min(d, pos), pos + d}) {
      if (p > text.size()) continue;
      if (p == 0 || p == text.size() || text[p - 1] == ' ') return p;
    }
  }
  return pos;
}

// Where a source position falls in the target without alignments: the same share of the
// text, on a word boundary.
size_t proportional(size_t pos, size_t source_size, size_t target_size, const std::string& target) {
  if (source_size == 0) return 0;
  return word_boundary(target, static_cast<size_t>(static_cast<double>(pos) * static_cast<double>(target_size) /
                                                   static_cast<double>(source_size) + 0.5));
}

// A span's range on the target, before nesting is repaired: the whole target for a span of
// the whole source; else the target words aligned to its source words; else its share.
std::pair<size_t, size_t> raw_range(const InlineSpan& s, const std::string& source, const TranslatedText& t) {
  const size_t n = t.text.size();
  if (s.begin == 0 && s.end == source.size() && s.end > 0) return {0, n};
  if (s.begin < s.end) {
    size_t lo = SIZE_MAX, hi = 0;
    for (const AlignedRange& a : t.alignments) {
      if (a.source_end <= s.begin || a.source_begin >= s.end) continue;
      lo = std::min(lo, a.target_begin);
      hi = std::max(hi, a.target_end);
    }
    if (lo < hi && hi <= n) return {lo, hi};
  } else {
    size_t best = SIZE_MAX, at = n;  // a void before the first word aligned after it
    for (const AlignedRange& a : t.alignments) {
      if (a.source_begin >= s.begin && a.source_begin < best && a.target_begin <= n) {
        best = a.source_begin;
        at = a.target_begin;
      }
    }
    if (!t.alignments.empty()) return {at, at};
  }
  const size_t b = proportional(s.begin, source.size(), n, t.text);
  const size_t e = s.end == s.begin ? b : std::max(b, proportional(s.end, source.size(), n, t.text));
  return {b, e};
}

// Every element and attribute of `node`'s subtree that uses `from` uses `to` instead.
void retarget(xmlNode* node, const xmlNs* from, xmlNs* to) {
  std::vector<xmlNode*> stack = {node};
  while (!stack.empty()) {
    xmlNode* n = stack.back();
    stack.pop_back();
    if (n->type != XML_ELEMENT_NODE) continue;
    if (n->ns == from) n->ns = to;
    for (xmlAttr* a = n->properties; a; a = a->next) {
      if (a->ns == from) a->ns = to;
    }
    for (xmlNode* c = n->children; c; c = c->next) stack.push_back(c);
  }
}

// Drops the namespace declarations in `top`'s subtree that repeat one in scope above them
// (copies made outside the tree declare the namespaces they use; in place the document's
// declarations serve), pointing their users at the one in scope.
void drop_repeated_namespaces(xmlNode* top) {
  std::vector<xmlNode*> stack = {top};
  while (!stack.empty()) {
    xmlNode* e = stack.back();
    stack.pop_back();
    if (e->type != XML_ELEMENT_NODE) continue;
    for (xmlNs** link = &e->nsDef; *link;) {
      xmlNs* d = *link;
      xmlNs* outer = e->parent ? xmlSearchNs(e->doc, e->parent, d->prefix) : nullptr;
      if (outer && xmlStrEqual(outer->href, d->href)) {
        retarget(e, d, outer);
        *link = d->next;
        d->next = nullptr;
        xmlFreeNs(d);
      } else {
        link = &d->next;
      }
    }
    for (xmlNode* c = e->children; c; c = c->next) stack.push_back(c);
  }
}

}  // namespace

std::vector<InlineSpan> place_spans(const InlineParagraph& p, const TranslatedText& t) {
  // Each span's enclosing span in the source (spans are in preorder).
  std::vector<int> parent(p.spans.size(), -1);
  std::vector<int> open;
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const InlineSpan& s = p.spans[i];
    while (!open.empty()) {
      const InlineSpan& o = p.spans[static_cast<size_t>(open.back())];
      if (o.begin <= s.begin && s.end <= o.end && !(o.begin == o.end)) break;
      open.pop_back();
    }
    if (!open.empty()) parent[i] = open.back();
    open.push_back(static_cast<int>(i));
  }
  // Nesting repaired in the source's order: a span stays within its parent's range and after
  // its previous sibling (so the placed spans nest as the source's did).
  std::vector<InlineSpan> placed(p.spans.size());
  std::vector<size_t> floor_after(p.spans.size() + 1, 0);  // per parent (+1): next free position
  for (size_t i = 0; i < p.spans.size(); ++i) {
    auto [b, e] = raw_range(p.spans[i], p.text, t);
    size_t lo = 0, hi = t.text.size();
    if (parent[i] >= 0) {
      lo = placed[static_cast<size_t>(parent[i])].begin;
      hi = placed[static_cast<size_t>(parent[i])].end;
    }
    size_t& next = floor_after[static_cast<size_t>(parent[i] + 1)];
    if (parent[i] >= 0 && next < lo) next = lo;
    lo = std::max(lo, next);
    b = std::clamp(b, lo, hi);
    e = std::clamp(e, b, hi);
    placed[i] = {b, e, p.spans[i].id};
    next = e;
    floor_after[i + 1] = b;
  }
  // A leaf holds no other item: what landed inside one moves to its end, emptied.
  for (size_t i = 0; i < placed.size(); ++i) {
    if (p.items[static_cast<size_t>(placed[i].id)].kind != Kind::kLeaf) continue;
    for (size_t j = 0; j < placed.size(); ++j) {
      if (j == i || placed[j].begin < placed[i].begin || placed[j].end > placed[i].end) continue;
      if (placed[j].begin == placed[i].begin && placed[j].end == placed[i].end && j < i) continue;
      if (placed[j].begin == placed[i].end) continue;
      if (placed[j].begin == placed[j].end && placed[j].begin == placed[i].begin) continue;  // just before it
      placed[j].begin = placed[j].end = placed[i].end;
    }
  }
  return placed;
}

void rebuild_paragraph(InlineParagraph& p, const std::string& text, const std::vector<InlineSpan>& placed,
                       const InlineFormat& format) {
  for (xmlNode* n : p.content) xmlUnlinkNode(n);
  // Built in a detached holder, then moved into the paragraph before `before`.
  xmlNode* holder = xmlNewDocNode(p.element->doc, nullptr, BAD_CAST "holder", nullptr);
  std::vector<InlineSpan> order = placed;
  // Opening order: by start; at one start the empty ones (voids) first, so that they stay
  // outside a run that starts there, then the longer first, then the source's order (outer
  // before inner).
  std::stable_sort(order.begin(), order.end(), [](const InlineSpan& a, const InlineSpan& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    const bool a_empty = a.begin == a.end, b_empty = b.begin == b.end;
    if (a_empty != b_empty) return a_empty;
    if (a.end != b.end) return a.end > b.end;
    return a.id < b.id;
  });
  struct Open {
    xmlNode* node;
    size_t end;
  };
  std::vector<Open> stack = {{holder, SIZE_MAX}};
  size_t pos = 0;
  // Writes the text up to `upto`, closing the spans that end on the way.
  auto advance = [&](size_t upto) {
    while (true) {
      const Open top = stack.back();
      const size_t limit = std::min(upto, top.end);
      if (limit > pos) {
        format.add_text(top.node, text.substr(pos, limit - pos));
        pos = limit;
      }
      if (stack.size() > 1 && top.end <= upto && top.end <= pos) {
        stack.pop_back();
        continue;
      }
      break;
    }
  };
  for (const InlineSpan& s : order) {
    advance(s.begin);
    const InlineItem& item = p.items[static_cast<size_t>(s.id)];
    if (item.kind == Kind::kVoid) {
      xmlUnlinkNode(item.node);
      xmlNode* node = item.node;
      if (item.wrap) {
        node = format.shell(item.wrap);
        xmlAddChild(node, item.node);
      }
      xmlAddChild(stack.back().node, node);
      continue;
    }
    if (item.kind == Kind::kLeaf && s.begin == s.end) continue;  // an emptied run: nothing to write
    xmlNode* shell = format.shell(item.node);
    xmlAddChild(stack.back().node, shell);
    stack.push_back({shell, s.end});
  }
  advance(text.size());
  for (xmlNode* c = holder->children; c;) {
    xmlNode* next = c->next;
    xmlUnlinkNode(c);
    if (p.before) {
      xmlAddPrevSibling(p.before, c);
    } else {
      xmlAddChild(p.element, c);
    }
    if (c->type == XML_ELEMENT_NODE) drop_repeated_namespaces(c);
    c = next;
  }
  xmlFreeNode(holder);
  // The old content, less the voids moved out of it into the new.
  for (xmlNode* n : p.content) {
    const bool moved = std::any_of(p.items.begin(), p.items.end(),
                                   [&](const InlineItem& i) { return i.kind == Kind::kVoid && i.node == n; });
    if (!moved) xmlFreeNode(n);
  }
  p.content.clear();
}

}  // namespace nmt::server
