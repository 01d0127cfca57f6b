// span_transfer (server/markup/span_transfer.h): tables of texts, spans and word alignments
// written here (the engine's alignments join in the HTML tests), the refusals, and the
// invariants over generated trees and alignments: every span once, inside its parent,
// siblings apart.
#include "server/markup/span_transfer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "model/error.h"

namespace nmt::markup {
namespace {

// The byte ranges of a text's space-separated words.
std::vector<ByteRange> words(std::string_view text) {
  std::vector<ByteRange> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    const std::size_t b = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i > b) out.push_back({b, i});
  }
  return out;
}

// The span over words [first, last] of a text.
ByteRange over(std::string_view text, std::size_t first, std::size_t last) {
  const auto w = words(text);
  return {w.at(first).begin, w.at(last).end};
}

// Target word t came from source word s, for each pair.
std::vector<AlignmentLink> align(std::string_view source, std::string_view target,
                                 const std::vector<std::pair<int, int>>& target_to_source) {
  const auto ws = words(source), wt = words(target);
  std::vector<AlignmentLink> links;
  for (auto [t, s] : target_to_source) links.push_back({ws.at(s), wt.at(t)});
  return links;
}

// The text with each span written as <id>...</id>, an empty one as <id/>.
void render_into(std::string_view text, const std::vector<Span>& spans, int parent,
                 std::size_t begin, std::size_t end, std::string& out) {
  std::size_t at = begin;
  for (int c : children_in_order(spans, parent)) {
    const ByteRange r = spans[c].range;
    out.append(text.substr(at, r.begin - at));
    const std::string id = std::to_string(spans[c].id);
    if (r.begin == r.end && children_in_order(spans, c).empty()) {
      out += "<" + id + "/>";
    } else {
      out += "<" + id + ">";
      render_into(text, spans, c, r.begin, r.end, out);
      out += "</" + id + ">";
    }
    at = r.end;
  }
  out.append(text.substr(at, end - at));
}

std::string render(std::string_view text, const std::vector<Span>& spans) {
  std::string out;
  render_into(text, spans, -1, 0, text.size(), out);
  return out;
}

std::string transfer(std::string_view source, const std::vector<Span>& spans,
                     std::string_view target, const std::vector<std::pair<int, int>>& t2s) {
  return render(target, transfer_spans(source, spans, target, align(source, target, t2s)));
}

TEST(SpanTransfer, MonotoneKeepsTheTagOnTheSameWord) {
  const std::string src = "hello big world";
  EXPECT_EQ(render(src, {{over(src, 1, 1), -1, 1}}), "hello <1>big</1> world");
  EXPECT_EQ(transfer(src, {{over(src, 1, 1), -1, 1}}, "hallo grosse Welt", {{0, 0}, {1, 1}, {2, 2}}),
            "hallo <1>grosse</1> Welt");
}

TEST(SpanTransfer, ReorderedWordsTakeTheirTags) {
  const std::string src = "the red car";
  // "the <b>red</b> car" -> "das Auto ist rot": rot came from red.
  EXPECT_EQ(transfer(src, {{over(src, 1, 1), -1, 7}}, "das Auto ist rot",
                     {{0, 0}, {1, 2}, {2, 2}, {3, 1}}),
            "das Auto ist <7>rot</7>");
  // Two tags swap places with their words.
  EXPECT_EQ(transfer(src, {{over(src, 0, 0), -1, 1}, {over(src, 2, 2), -1, 2}}, "car red the",
                     {{0, 2}, {1, 1}, {2, 0}}),
            "<2>car</2> red <1>the</1>");
}

TEST(SpanTransfer, ATagOverSeveralWordsCoversTheWordsBetween) {
  const std::string src = "a b c d";
  // b and c in the tag; the target puts an unaligned-to-tag word between them.
  EXPECT_EQ(transfer(src, {{over(src, 1, 2), -1, 1}}, "A B X C D",
                     {{0, 0}, {1, 1}, {2, 0}, {3, 2}, {4, 3}}),
            "A <1>B X C</1> D");
}

TEST(SpanTransfer, NestedTagsStayNested) {
  const std::string src = "x y z";
  // <1>x <2>y</2></1> z, the target reverses the words.
  const std::vector<Span> spans = {{over(src, 0, 1), -1, 1}, {over(src, 1, 1), 0, 2}};
  EXPECT_EQ(render(src, spans), "<1>x <2>y</2></1> z");
  EXPECT_EQ(transfer(src, spans, "Z Y X", {{0, 2}, {1, 1}, {2, 0}}), "Z <1><2>Y</2> X</1>");
  // Same range, outer first: <1><2>x</2></1>.
  const std::vector<Span> same = {{over(src, 0, 0), -1, 1}, {over(src, 0, 0), 0, 2}};
  EXPECT_EQ(transfer(src, same, "Y X Z", {{0, 1}, {1, 0}, {2, 2}}), "Y <1><2>X</2></1> Z");
}

TEST(SpanTransfer, InterleavedRunsAreCutSoTheyDoNotOverlap) {
  const std::string src = "a b c";
  // <1>a</1> <2>b</2> c -> "A B A2": the second token of <1> comes after <2>'s token.
  const std::vector<Span> spans = {{over(src, 0, 0), -1, 1}, {over(src, 1, 1), -1, 2}};
  EXPECT_EQ(transfer(src, spans, "A B A2", {{0, 0}, {1, 1}, {2, 0}}), "<1>A</1> <2>B</2> A2");
}

TEST(SpanTransfer, VoidElementsFollowTheWordBeforeThem) {
  const std::string src = "a b";  // a<br/> b, the void element right after "a"
  const std::vector<Span> spans = {{{1, 1}, -1, 9}};
  EXPECT_EQ(render(src, spans), "a<9/> b");
  EXPECT_EQ(transfer(src, spans, "B A", {{0, 1}, {1, 0}}), "B A<9/>");
  // At the start: before the word that came from the first source word.
  EXPECT_EQ(transfer(src, {{{0, 0}, -1, 9}}, "B A", {{0, 1}, {1, 0}}), "B <9/>A");
  // Inside a span: stays inside it.
  const std::vector<Span> nested = {{over(src, 0, 1), -1, 1}, {{1, 1}, 0, 9}};
  EXPECT_EQ(transfer(src, nested, "B A", {{0, 1}, {1, 0}}), "<1>B A<9/></1>");
}

// The spaces a serializer writes beside an element kept as it is: where the source had it
// apart from its words and the target has a word right beside its place; never at the text's
// ends, never where a space already is.
TEST(SpanTransfer, SpacesBesideAKeptElementKeepItApart) {
  const Apart both{true, true}, none{false, false}, before{true, false}, after{false, true};
  EXPECT_EQ(spaces_beside("NOW RUN", 7, both), before);     // at the end: nothing after it
  EXPECT_EQ(spaces_beside("NOW RUN", 0, both), after);      // at the start: nothing before
  EXPECT_EQ(spaces_beside("NOW RUN", 3, both), before);     // "NOW| RUN": a space after already
  EXPECT_EQ(spaces_beside("NOW RUN", 4, both), after);      // "NOW |RUN": a space before already
  EXPECT_EQ(spaces_beside("NOW RUN", 2, both), both);       // inside a word
  EXPECT_EQ(spaces_beside("NOW RUN", 5, before), before);
  EXPECT_EQ(spaces_beside("NOW RUN", 5, after), after);
  EXPECT_EQ(spaces_beside("NOW RUN", 5, none), none);       // glued in the source: glued
  EXPECT_EQ(spaces_beside("", 0, both), none);
  EXPECT_EQ(spaces_beside("a\tb", 1, both), before);        // any whitespace counts
  EXPECT_THROW(spaces_beside("ab", 3, both), Error);
}

TEST(SpanTransfer, ASpanWhoseWordsWereDroppedIsKeptEmpty) {
  const std::string src = "a b c";
  // b aligned to nothing in the target: its tag stays, empty, after the word of a and the
  // space after it (as in the source).
  EXPECT_EQ(transfer(src, {{over(src, 1, 1), -1, 1}}, "A C", {{0, 0}, {1, 2}}), "A <1/>C");
  // An empty target: every span, empty, at 0.
  const std::vector<Span> two = {{over(src, 0, 1), -1, 1}, {over(src, 1, 1), 0, 2}};
  EXPECT_EQ(render("", transfer_spans(src, two, "", {})), "<1><2/></1>");
}

TEST(SpanTransfer, ATokenAcrossATagBoundaryTakesTheTagItOverlapsMost) {
  const std::string src = "undone";  // <1>un</1>done: a third of the token in the tag
  EXPECT_EQ(transfer(src, {{{0, 2}, -1, 1}}, "rückgängig", {{0, 0}}), "<1/>rückgängig");
  EXPECT_EQ(transfer(src, {{{0, 4}, -1, 1}}, "rückgängig", {{0, 0}}), "<1>rückgängig</1>");
  EXPECT_EQ(transfer(src, {{{0, 3}, -1, 1}}, "rückgängig", {{0, 0}}), "<1>rückgängig</1>");
}

TEST(SpanTransfer, SubwordTokensOfOneWordAreCoveredTogether) {
  const std::string src = "a big house";
  const std::string tgt = "ein grosses Haus";
  // "grosses" as two tokens "gross" + "es", both from "big".
  std::vector<AlignmentLink> links = {{{0, 1}, {0, 3}}, {{2, 5}, {4, 9}}, {{2, 5}, {9, 11}},
                                      {{6, 11}, {12, 16}}};
  EXPECT_EQ(render(tgt, transfer_spans(src, {{{2, 5}, -1, 1}}, tgt, links)),
            "ein <1>grosses</1> Haus");
}

TEST(SpanTransfer, TagsDoNotCutWords) {
  // "Fahrrad" as "Fahr" + "rad", only "Fahr" aligned to the tagged "bike": the tag takes the
  // word, not its piece; punctuation after it stays outside.
  const std::string src = "a bike.";
  const std::string tgt = "ein Fahrrad.";
  const std::vector<AlignmentLink> links = {{{0, 1}, {0, 3}}, {{2, 6}, {4, 8}}, {{0, 1}, {8, 11}},
                                            {{6, 7}, {11, 12}}};
  EXPECT_EQ(render(tgt, transfer_spans(src, {{{2, 6}, -1, 1}}, tgt, links)), "ein <1>Fahrrad</1>.");
  // A void element after "a" lands after the word whose first piece came from "a".
  EXPECT_EQ(render(tgt, transfer_spans(src, {{{1, 1}, -1, 9}}, tgt, {{{0, 1}, {4, 8}}, {{2, 6}, {8, 11}}})),
            "ein Fahrrad<9/>.");
  // Two tags in one word: each keeps its piece (no room to grow).
  EXPECT_EQ(render(tgt, transfer_spans(src, {{{0, 1}, -1, 1}, {{2, 6}, -1, 2}}, tgt,
                                       {{{0, 1}, {4, 8}}, {{2, 6}, {8, 11}}})),
            "ein <1>Fahr</1><2>rad</2>.");
}

TEST(SpanTransfer, TheFirstPairOfATargetTokenCounts) {
  const std::string src = "a b";
  std::vector<AlignmentLink> links = {{{2, 3}, {0, 1}}, {{0, 1}, {0, 1}}};
  EXPECT_EQ(render("X", transfer_spans(src, {{{2, 3}, -1, 1}}, "X", links)), "<1>X</1>");
  EXPECT_EQ(render("X", transfer_spans(src, {{{0, 1}, -1, 1}}, "X", links)), "<1/>X");
}

void expect_refused(std::string_view source, const std::vector<Span>& spans,
                    std::string_view target, const std::vector<AlignmentLink>& links,
                    const std::string& says) {
  try {
    transfer_spans(source, spans, target, links);
    ADD_FAILURE() << "accepted; expected a refusal saying " << says;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(SpanTransfer, BadSpansAndLinksAreRefusedNamingWhatIsWrong) {
  expect_refused("abc", {{{1, 5}, -1, 1}}, "x", {}, "span 0 [1, 5) lies outside the source");
  expect_refused("abc", {{{0, 1}, 0, 1}}, "x", {}, "span 0 has parent 0");
  expect_refused("abc", {{{0, 1}, -1, 1}, {{0, 2}, 0, 2}}, "x", {}, "span 1 [0, 2) leaves its parent");
  expect_refused("abc", {{{0, 2}, -1, 1}, {{1, 3}, -1, 2}}, "x", {}, "sibling spans 0 [0, 2) and 1 [1, 3) overlap");
  expect_refused("abc", {{{0, 2}, -1, 1}, {{1, 1}, -1, 2}}, "x", {}, "sibling spans");
  expect_refused("abc", {}, "x", {{{0, 4}, {0, 1}}}, "alignment 0: source range [0, 4)");
  expect_refused("abc", {}, "x", {{{0, 1}, {0, 2}}}, "alignment 0: target range [0, 2)");
  expect_refused("abc", {}, "xyz", {{{0, 1}, {0, 2}}, {{1, 2}, {1, 3}}}, "target tokens [0, 2) and [1, 3) overlap");
  // Touching siblings and an empty span at a sibling's edge are fine.
  EXPECT_NO_THROW(transfer_spans("abc", {{{0, 1}, -1, 1}, {{1, 1}, -1, 2}, {{1, 3}, -1, 3}}, "x", {}));
}

// A random tree of spans over a text of n one-letter words and a random alignment.
struct Generated {
  std::string source, target;
  std::vector<Span> spans;
  std::vector<std::pair<int, int>> t2s;
};

void grow(std::mt19937& rng, Generated& g, int parent, int first, int last, int depth) {
  // Children over disjoint word ranges of [first, last], some empty.
  int at = first;
  while (at <= last && depth < 6) {
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
    if (kind == 0) { ++at; continue; }
    const auto w = words(g.source);
    if (kind == 1) {  // an empty span before word `at`
      g.spans.push_back({{w[at].begin, w[at].begin}, parent, static_cast<int>(g.spans.size())});
      ++at;
      continue;
    }
    const int end = std::uniform_int_distribution<int>(at, last)(rng);
    const int self = static_cast<int>(g.spans.size());
    g.spans.push_back({{w[at].begin, w[end].end}, parent, self});
    grow(rng, g, self, at, end, depth + 1);
    at = end + 1;
  }
}

TEST(SpanTransfer, EverySpanOnceInsideItsParentSiblingsApart) {
  std::mt19937 rng(55);
  for (int trial = 0; trial < 2000; ++trial) {
    Generated g;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    const int m = std::uniform_int_distribution<int>(0, 14)(rng);
    for (int i = 0; i < n; ++i) g.source += (i ? " " : "") + std::string(1, char('a' + i));
    for (int i = 0; i < m; ++i) g.target += (i ? " " : "") + std::string(1, char('A' + i));
    grow(rng, g, -1, 0, n - 1, 0);
    for (int t = 0; t < m; ++t)
      if (std::uniform_int_distribution<int>(0, 5)(rng))
        g.t2s.push_back({t, std::uniform_int_distribution<int>(0, n - 1)(rng)});
    const auto out = transfer_spans(g.source, g.spans, g.target, align(g.source, g.target, g.t2s));
    ASSERT_EQ(out.size(), g.spans.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " span " + std::to_string(i) + ": " +
                   render(g.source, g.spans) + " -> " + render(g.target, out));
      EXPECT_EQ(out[i].id, g.spans[i].id);
      EXPECT_EQ(out[i].parent, g.spans[i].parent);
      const ByteRange r = out[i].range;
      ASSERT_LE(r.begin, r.end);
      ASSERT_LE(r.end, g.target.size());
      if (out[i].parent >= 0) {
        EXPECT_GE(r.begin, out[out[i].parent].range.begin);
        EXPECT_LE(r.end, out[out[i].parent].range.end);
      }
    }
    // Siblings apart: in order, each starts where the one before ended or later, and the
    // rendering (which writes each span once) keeps the target's text.
    for (int p = -1; p < static_cast<int>(out.size()); ++p) {
      const auto kids = children_in_order(out, p);
      for (std::size_t k = 1; k < kids.size(); ++k)
        EXPECT_LE(out[kids[k - 1]].range.end, out[kids[k]].range.begin);
    }
    std::string text;
    bool in_tag = false;
    for (char c : render(g.target, out)) {
      if (c == '<') in_tag = true;
      if (!in_tag) text += c;
      if (c == '>') in_tag = false;
    }
    EXPECT_EQ(text, g.target);
  }
}

}  // namespace
}  // namespace nmt::markup
