// The Markdown document (server/markup/markdown.h): blocks and spans, what is kept (code,
// URLs, raw HTML), the depth bound, and 80 generated documents translated by a reordering
// translation with exact alignments (markup_test_support.h), each parsed back with cmark:
// the same nodes, URLs and code, each block's text the plain translation of a source block.
#include <cmark.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/error.h"
#include "server/markup/markdown.h"
#include "tests/server/markup/markup_test_support.h"

namespace nmt::markup {
namespace {

using testing::identity;
using testing::reverse_upper;
using testing::translate_all;

std::string translated(const std::string& md) {
  auto doc = parse_markdown(md, {}, "texts[0]");
  return doc->render(translate_all(*doc));
}

std::vector<std::string> block_texts(const std::string& md) {
  const auto doc = parse_markdown(md, {}, "texts[0]");
  std::vector<std::string> out;
  for (const Block& b : doc->blocks()) out.push_back(b.text);
  return out;
}

TEST(Markdown, BlocksAreParagraphsAndHeadingsWithoutTheirCode) {
  EXPECT_EQ(block_texts("# A *title*\n\nSome **bold _nested_ text** and `code` and "
                        "[a link](http://x.test/?a=1&b=2 \"T\") here\nsoft.\n\n```\ncode *x*\n```\n\n"
                        "- item one\n- item two\n"),
            (std::vector<std::string>{"A title", "Some bold nested text and and a link here soft.",
                                      "T", "item one", "item two"}));
  // An image's alt and title are blocks of their own, after the sentence; the image is a
  // void span in it.
  EXPECT_EQ(block_texts("a ![small *cat*](c.png \"my  pet\") b\n\n![only `alt`](x.png)\n"),
            (std::vector<std::string>{"a b", "small cat", "my pet", "only alt"}));
  EXPECT_TRUE(block_texts("```\nonly code\n```\n\n    indented code\n\n---\n").empty());
}

TEST(Markdown, EmphasisAndLinksFollowTheirWords) {
  EXPECT_EQ(translated("hello *big* world\n"), "WORLD *BIG* HELLO\n");
  EXPECT_EQ(translated("two **dogs _play_** here\n"), "HERE ***PLAY* DOGS** TWO\n");
  EXPECT_EQ(translated("see [the docs](https://x.test/a_b?c=1 \"Docs\") now\n"),
            "NOW [DOCS THE](https://x.test/a_b?c=1 \"DOCS\") SEE\n");
  EXPECT_EQ(translated("## my *page*\n"), "## *PAGE* MY\n");
  EXPECT_EQ(translated("a ![small cat](cat.png) b\n"), "B A ![CAT SMALL](cat.png)\n");
}

TEST(Markdown, TitlesAndAltsAreTranslated) {
  EXPECT_EQ(translated("see [it](http://x.test \"the \\\"best\\\" docs\") now\n"),
            "NOW [IT](http://x.test \"DOCS \\\"BEST\\\" THE\") SEE\n");
  EXPECT_EQ(translated("![a small cat](cat.png \"my pet\")\n"), "![CAT SMALL A](cat.png \"PET MY\")\n");
  EXPECT_EQ(translated("[![the logo](l.png)](http://x.test \"home page\")\n"),
            "[![LOGO THE](l.png)](http://x.test \"PAGE HOME\")\n");
  // Text that reads as markup once translated is escaped: "]" in an alt, a quote in a title.
  auto doc = parse_markdown("![a](x.png \"t\")\n", {}, "texts[0]");
  ASSERT_EQ(doc->blocks().size(), 2u);
  const std::string out = doc->render({{"a] [b", {}}, {"say \"hi\"", {}}});
  auto back = parse_markdown(out, {}, "texts[0]");
  ASSERT_EQ(back->blocks().size(), 2u) << out;
  EXPECT_EQ(back->blocks()[0].text, "a] [b") << out;
  EXPECT_EQ(back->blocks()[1].text, "say \"hi\"") << out;
}

// Elements kept as they are keep the whitespace beside them where the placing moves them
// (span_transfer.h, spaces_beside): never glued to a word they were apart from, never a
// space doubled, and an element glued to its word stays glued.
TEST(Markdown, KeptElementsKeepTheirSpacing) {
  for (const char* md : {"run `ls -l` now\n", "run`ls -l` now\n", "run `ls -l`now\n",
                         "a <br/> b <!-- c --> d\n", "see ![x](y.png) here\n", "`a` b `c`\n"}) {
    auto doc = parse_markdown(md, {}, "texts[0]");
    EXPECT_EQ(doc->render(identity(*doc)), md);
  }
  EXPECT_EQ(translated("`a` b `c`\n"), "`a` B `c`\n");  // placed by the one word they sit beside
}

TEST(Markdown, CodeUrlsAndRawHtmlAreKept) {
  EXPECT_EQ(translated("run `ls -l` now\n"), "NOW RUN `ls -l`\n");
  EXPECT_EQ(translated("```python\nx = \"*a*\"\n```\n"), "``` python\nx = \"*a*\"\n```\n");
  // Raw HTML's start and end tags move together around what was between them.
  EXPECT_EQ(translated("a <b>raw</b> b\n"), "B <b>RAW</b> A\n");
  EXPECT_EQ(translated("a <br/> b <!-- c --> d\n"), "D B <!-- c --> A <br/>\n");
  // Text that reads as markup once translated is escaped by cmark's renderer.
  auto doc = parse_markdown("a b\n", {}, "texts[0]");
  EXPECT_EQ(doc->render({{"*x* [y]", {{{0, 1}, {0, 3}}, {{2, 3}, {4, 7}}}}}), "\\*x\\* \\[y\\]\n");
}

TEST(Markdown, NestingDeeperThanTheBoundIsRefusedWithItsReason) {
  EXPECT_NO_THROW(parse_markdown(std::string(20, '>') + " deep\n", {30}, "texts[2]"));
  try {
    parse_markdown(std::string(40, '>') + " deep\n", {30}, "texts[2]");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "texts[2]: Markdown blocks and inlines nest deeper than 30 (limits.max_markup_depth)");
  }
  std::string lists;
  for (int i = 0; i < 200; ++i) lists += std::string(2 * i, ' ') + "- item\n";
  EXPECT_THROW(parse_markdown(lists, {100}, "texts[0]"), Error);
  EXPECT_THROW(parse_markdown(std::string(50000, '>') + " x", {100}, "texts[0]"), Error);
}

// ---- 80 generated documents ----

struct Generator {
  std::mt19937 rng{55};
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }

  std::string words() {
    static const char* w[] = {"two", "dogs", "play", "in", "the", "snow", "a", "man", "rides",
                              "bike", "caf\u00e9", "x&y", "1+1", "50%"};
    std::string s;
    for (int n = 1 + pick(3); n-- > 0;) s += std::string(s.empty() ? "" : " ") + w[pick(14)];
    return s;
  }

  std::string inlines(int depth) {
    std::string s;
    for (int n = 1 + pick(4); n-- > 0;) {
      if (!s.empty()) s += ' ';
      switch (depth > 2 ? 0 : pick(8)) {
        case 0: case 1: s += words(); break;
        case 2: s += "*" + words() + "*"; break;
        case 3: s += "**" + inlines(depth + 1) + "**"; break;
        case 4: s += "[" + words() + "](https://x.test/p_" + std::to_string(pick(9)) + "?a=1&b=2)"; break;
        case 5: s += "`code " + std::to_string(pick(9)) + "`"; break;
        case 6: s += "![" + words() + "](img" + std::to_string(pick(9)) + ".png)"; break;
        default: s += "_" + words() + "_"; break;
      }
    }
    return s;
  }

  std::string document() {
    std::string s;
    for (int n = 1 + pick(4); n-- > 0;) {
      switch (pick(6)) {
        case 0: s += "# " + inlines(0) + "\n\n"; break;
        case 1: s += "- " + inlines(0) + "\n- " + inlines(0) + "\n\n"; break;
        case 2: s += "> " + inlines(0) + "\n\n"; break;
        case 3: s += "```\nkept *as* is\n```\n\n"; break;
        default: s += inlines(0) + "\n" + inlines(0) + "\n\n"; break;
      }
    }
    return s;
  }
};

struct Inventory {
  std::map<std::string, int> nodes;        // by type, text and breaks left out
  std::multiset<std::string> urls, code;   // link and image URLs, code spans and blocks
};

Inventory inventory(const std::string& md) {
  Inventory inv;
  cmark_node* root = cmark_parse_document(md.data(), md.size(), CMARK_OPT_DEFAULT);
  cmark_iter* it = cmark_iter_new(root);
  for (cmark_event_type ev; (ev = cmark_iter_next(it)) != CMARK_EVENT_DONE;) {
    if (ev != CMARK_EVENT_ENTER) continue;
    cmark_node* n = cmark_iter_get_node(it);
    const cmark_node_type t = cmark_node_get_type(n);
    if (t == CMARK_NODE_TEXT || t == CMARK_NODE_SOFTBREAK) continue;
    // An emphasis left without words comes back as raw HTML (markdown.cc).
    const std::string html = t == CMARK_NODE_HTML_INLINE ? cmark_node_get_literal(n) : "";
    if (html == "<em>" || html == "<strong>") ++inv.nodes[html == "<em>" ? "emph" : "strong"];
    if (html == "<em>" || html == "<strong>" || html == "</em>" || html == "</strong>") continue;
    ++inv.nodes[cmark_node_get_type_string(n)];
    if (t == CMARK_NODE_LINK || t == CMARK_NODE_IMAGE) inv.urls.insert(cmark_node_get_url(n));
    if (t == CMARK_NODE_CODE || t == CMARK_NODE_CODE_BLOCK) inv.code.insert(cmark_node_get_literal(n));
  }
  cmark_iter_free(it);
  cmark_node_free(root);
  return inv;
}

TEST(Markdown, GeneratedDocumentsKeepTheirStructureAndCarryTheTranslatedText) {
  Generator gen;
  int blocks = 0;
  for (int i = 0; i < 80; ++i) {
    const std::string source = gen.document();
    SCOPED_TRACE("document " + std::to_string(i) + ":\n" + source);
    auto doc = parse_markdown(source, {}, "texts[0]");
    const std::string out = doc->render(translate_all(*doc));
    SCOPED_TRACE("translated:\n" + out);
    const Inventory in = inventory(source), back = inventory(out);
    EXPECT_EQ(back.nodes, in.nodes);
    EXPECT_EQ(back.urls, in.urls);
    EXPECT_EQ(back.code, in.code);
    auto again = parse_markdown(out, {}, "texts[0]");
    std::multiset<std::pair<std::string, std::size_t>> expected, got;
    for (const Block& b : doc->blocks()) expected.insert({reverse_upper(b.text).text, b.spans.size()});
    for (const Block& b : again->blocks()) got.insert({b.text, b.spans.size()});
    EXPECT_EQ(got, expected);
    blocks += static_cast<int>(doc->blocks().size());
    // The identity translation is a fixed point of cmark's rendering.
    const std::string same = doc->render(identity(*doc));
    auto reparsed = parse_markdown(same, {}, "texts[0]");
    EXPECT_EQ(reparsed->render(identity(*reparsed)), same);
  }
  EXPECT_GT(blocks, 150);
}

}  // namespace
}  // namespace nmt::markup
