// The HTML document (server/markup/html.h): blocks and spans, what is kept as it is, entities,
// fragments and whole documents, the depth bound, and 240 generated snippets translated by a
// reordering translation with exact alignments (markup_test_support.h), each parsed back
// with gumbo: no parse error, every element kept exactly once, each block's text the plain
// translation of the source block, the kept parts unchanged.
#include <gtest/gtest.h>
#include <gumbo.h>

#include <algorithm>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "model/error.h"
#include "server/markup/html.h"
#include "tests/server/markup/html_snippets.h"
#include "tests/server/markup/markup_test_support.h"

namespace nmt::markup {
namespace {

using testing::identity;
using testing::reverse_upper;
using testing::translate_all;

std::string translated(const std::string& html) {
  auto doc = parse_html(html, {}, "texts[0]");
  return doc->render(translate_all(*doc));
}

std::string unchanged(const std::string& html) {
  auto doc = parse_html(html, {}, "texts[0]");
  return doc->render(identity(*doc));
}

std::vector<std::string> block_texts(const std::string& html) {
  std::vector<std::string> out;
  const auto doc = parse_html(html, {}, "texts[0]");
  for (const Block& b : doc->blocks()) out.push_back(b.text);
  return out;
}

TEST(Html, BlocksAreTheRunsOfInlineContentAndTheTranslatedAttributes) {
  EXPECT_EQ(block_texts("<p>Hello <b>big</b> world</p><div>Two <i>dogs</i><p>play</p> here</div>"),
            (std::vector<std::string>{"Hello big world", "Two dogs", "play", "here"}));
  EXPECT_EQ(block_texts("<p title=\"A tip\">Look <img src=\"x.png\" alt=\"a cat\"> here</p>"
                        "<input placeholder=\"Your name\" value=\"kept\">"),
            (std::vector<std::string>{"A tip", "a cat", "Look here", "Your name"}));
  // Whitespace collapses (as HTML renders it); a line break separates words.
  EXPECT_EQ(block_texts("<p>\n  one\n   two<br>three </p>"), (std::vector<std::string>{"one two three"}));
  EXPECT_TRUE(block_texts("<p> </p><br><hr>").empty());
}

TEST(Html, TagsFollowTheirWords) {
  EXPECT_EQ(translated("<p>Hello <b>big</b> world</p>"), "<p>WORLD <b>BIG</b> HELLO</p>");
  EXPECT_EQ(translated("<p><a href=\"/x?a=1&amp;b=2\">two dogs</a> play</p>"),
            "<p>PLAY <a href=\"/x?a=1&amp;b=2\">DOGS TWO</a></p>");
  EXPECT_EQ(translated("<p>a <b>b <i>c</i></b> d</p>"), "<p>D <b><i>C</i> B</b> A</p>");
  EXPECT_EQ(unchanged("<p>a <b>b <i>c</i></b> d</p>"), "<p>a <b>b <i>c</i></b> d</p>");
}

TEST(Html, AttributesAreTranslatedOthersKept) {
  EXPECT_EQ(translated("<p title=\"a tip\" class=\"x y\">hi there</p>"),
            "<p title=\"TIP A\" class=\"x y\">THERE HI</p>");
  EXPECT_EQ(translated("<img src=\"cat.png\" alt=\"a &quot;cat&quot;\">"),
            "<img src=\"cat.png\" alt=\"&quot;CAT&quot; A\">");
  EXPECT_EQ(translated("<input type=\"text\" placeholder=\"your name\">"),
            "<input type=\"text\" placeholder=\"NAME YOUR\">");
}

TEST(Html, ScriptStyleCodePreAndTranslateNoAreLeftAlone) {
  EXPECT_EQ(translated("<pre>keep  <b>this</b>\n as is</pre>"), "<pre>keep  <b>this</b>\n as is</pre>");
  EXPECT_EQ(translated("<script>if (a < b) x = \"<b>\";</script><style>p > b {}</style>"),
            "<script>if (a < b) x = \"<b>\";</script><style>p > b {}</style>");
  EXPECT_EQ(translated("<div translate=\"no\" title=\"kept\">Brand <b>name</b></div>"),
            "<div translate=\"no\" title=\"kept\">Brand <b>name</b></div>");
  // Inline ones stay where the alignments put them, like void elements.
  EXPECT_EQ(translated("<p>run <code>ls -l</code> now</p>"), "<p>NOW RUN <code>ls -l</code></p>");
  EXPECT_EQ(translated("<p>see <span translate=\"NO\">Acme</span> now</p>"),
            "<p>NOW SEE <span translate=\"NO\">Acme</span></p>");
  EXPECT_EQ(translated("<p>a<!-- note --> b</p>"), "<p>B A<!-- note --></p>");
}

// Elements kept as they are keep the whitespace beside them where the placing moves them
// (span_transfer.h, spaces_beside): never glued to a word they were apart from, never a
// space doubled, and an element glued to its word stays glued.
TEST(Html, KeptElementsKeepTheirSpacing) {
  for (const char* html : {"<p>run <code>ls -l</code> now</p>", "<p>run<code>ls</code> now</p>",
                           "<p>run <code>ls</code>now</p>", "<p>a <span translate=\"no\">X</span> b</p>",
                           "<p>a <img src=\"x.png\"> b <!-- c --> d</p>", "<p><code>a</code> b <code>c</code></p>",
                           "<p>see <b>the <code>x</code> key</b> now</p>"}) {
    auto doc = parse_html(html, {}, "texts[0]");
    EXPECT_EQ(doc->render(identity(*doc)), html);
  }
  EXPECT_EQ(translated("<p>a <img src=\"x.png\"> b</p>"), "<p>B A <img src=\"x.png\"></p>");
  EXPECT_EQ(translated("<p>see <b>the <code>x</code> key</b> now</p>"),
            "<p>NOW <b>KEY THE <code>x</code></b> SEE</p>");
}

TEST(Html, EntitiesAreDecodedForTranslationAndEscapedAgain) {
  EXPECT_EQ(block_texts("<p>a &lt; b &amp; c&nbsp;d &eacute; &#169;</p>"),
            (std::vector<std::string>{"a < b & c\u00a0d \u00e9 \u00a9"}));
  EXPECT_EQ(unchanged("<p>a &lt; b &amp; c&nbsp;d &quot;q&quot; &eacute;</p>"),
            "<p>a &lt; b &amp; c&nbsp;d \"q\" \u00e9</p>");
  EXPECT_EQ(translated("<p>x &gt; y</p>"), "<p>Y &gt; X</p>");
}

TEST(Html, AFragmentStaysAFragmentADocumentADocument) {
  EXPECT_EQ(translated("hello <b>world</b>"), "<b>WORLD</b> HELLO");
  EXPECT_EQ(translated("<!DOCTYPE html><html><head><title>my page</title></head>"
                       "<body><p>hi there</p></body></html>"),
            "<!DOCTYPE html><html><head><title>PAGE MY</title></head><body><p>THERE HI</p></body></html>");
}

TEST(Html, UnclosedAndMisnestedTagsAreRepairedAsABrowserWould) {
  EXPECT_EQ(translated("<p>hello <b>big world"), "<p><b>WORLD BIG</b> HELLO</p>");
  EXPECT_EQ(unchanged("<p>a <b>b <i>c</b> d</i></p>"), "<p>a <b>b <i>c</i></b> <i>d</i></p>");
}

TEST(Html, NestingDeeperThanTheBoundIsRefusedWithItsReason) {
  auto nested = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "<div>";
    return s + "deep";
  };
  EXPECT_NO_THROW(parse_html(nested(20), {30}, "texts[1]"));
  EXPECT_NO_THROW(parse_html(nested(30), {30}, "texts[1]"));
  EXPECT_NO_THROW(parse_html("<!DOCTYPE html><html><body>" + nested(30), {30}, "texts[1]"));
  EXPECT_THROW(parse_html("<!DOCTYPE html><html><body>" + nested(31), {30}, "texts[1]"), Error);
  try {
    parse_html(nested(40), {30}, "texts[1]");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "texts[1]: HTML elements nest deeper than 30 (limits.max_markup_depth)");
  }
  // Far past any bound: refused before gumbo parses it (its tree builder is quadratic in
  // depth); optional end tags and void elements do not count as nesting.
  EXPECT_THROW(parse_html(nested(100000), {100}, "texts[0]"), Error);
  std::string flat;
  for (int i = 0; i < 300; ++i) flat += "<p>a<br>b<li>c<img src=x>";
  EXPECT_NO_THROW(parse_html(flat, {30}, "texts[0]"));
  EXPECT_THROW(parse_html("<b><i>" + nested(30), {30}, "texts[0]"), Error);
}

// ---- 240 generated snippets (html_snippets.h) ----

TEST(Html, GeneratedSnippetsComeBackValidWithEveryTagOnceAndTheTranslatedText) {
  testing::HtmlSnippets gen;
  int blocks = 0, spans = 0;
  for (int i = 0; i < 240; ++i) {
    const std::string source = gen.snippet();
    SCOPED_TRACE("snippet " + std::to_string(i) + ": " + source);
    auto doc = parse_html(source, {}, "texts[0]");
    const std::string out = doc->render(translate_all(*doc));
    SCOPED_TRACE("translated: " + out);
    testing::GumboTree in(source), back(out);
    ASSERT_EQ(in.output->errors.length, 0u) << "the generator wrote invalid HTML";
    EXPECT_EQ(back.output->errors.length, 0u) << "the translation does not parse cleanly";
    std::multiset<std::string> in_elements, out_elements;
    std::multiset<std::string> in_kept, out_kept;
    testing::inventory(in.output->root, false, in_elements, in_kept);
    testing::inventory(back.output->root, false, out_elements, out_kept);
    EXPECT_EQ(in_elements, out_elements);
    EXPECT_EQ(in_kept, out_kept);
    // Parsed again, the translation has the same blocks, each the plain translation of a
    // source block, with as many spans (attributes move with their elements: as sets).
    auto again = parse_html(out, {}, "texts[0]");
    std::multiset<std::pair<std::string, std::size_t>> expected, got;
    for (const Block& b : doc->blocks()) {
      expected.insert({reverse_upper(b.text).text, b.spans.size()});
      spans += static_cast<int>(b.spans.size());
    }
    for (const Block& b : again->blocks()) got.insert({b.text, b.spans.size()});
    EXPECT_EQ(got, expected);
    blocks += static_cast<int>(doc->blocks().size());
    // The identity translation gives the source back as the serializer writes it.
    const std::string same = doc->render(identity(*doc));
    auto reparsed = parse_html(same, {}, "texts[0]");
    EXPECT_EQ(reparsed->render(identity(*reparsed)), same);
  }
  EXPECT_GT(blocks, 600);
  EXPECT_GT(spans, 1000);
}

}  // namespace
}  // namespace nmt::markup
