// format html and markdown through the real nmt-server (gRPC, the demo model on the CPU, its
// own alignments): 220 generated HTML snippets (html_snippets.h) each come back valid
// (gumbo parses them without an error) with every element kept exactly once, what is kept
// as it is unchanged, and each block's text the plain translation of the source block
// (format text, the same server); Markdown documents likewise (cmark); the refusals.
#include <cmark.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "nmt/v1/translation.grpc.pb.h"
#include "server/markup/html.h"
#include "server/markup/markdown.h"
#include "tests/server/markup/html_snippets.h"
#include "tests/server/support/loopback_server.h"


namespace {

class MarkupServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new nmt::test::LoopbackServer(
        "nmt-markup-", std::string("server:\n  translation_cache_mb: 0\n") + "limits:\n  max_markup_depth: 30\n" +
                           "models:\n  - name: m30k\n    path: " + NMT_REPO_ROOT + "/models/m30k-en-de-small\n");
  }
  static void TearDownTestSuite() {
    if (server_) EXPECT_EQ(server_->process().stop(SIGTERM, 30), 0) << server_->process().log();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    const std::string why = server_->wait_serving();
    ASSERT_TRUE(why.empty()) << why;
  }

  static grpc::Status translate(const std::vector<std::string>& texts, const std::string& format,
                                nmt::v1::TranslateResponse* response, int num_hypotheses = 0) {
    nmt::v1::TranslateRequest request;
    for (const std::string& t : texts) request.add_texts(t);
    request.mutable_options()->set_format(format);
    if (num_hypotheses) request.mutable_options()->set_num_hypotheses(num_hypotheses);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    return nmt::v1::TranslationService::NewStub(server_->channel())->Translate(&ctx, request, response);
  }

  // The plain translations (format text) of `texts`, whitespace collapsed as a block's is.
  static std::vector<std::string> plain(const std::vector<std::string>& texts) {
    nmt::v1::TranslateResponse response;
    const grpc::Status status = translate(texts, "text", &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> out;
    for (const auto& t : response.translations()) out.push_back(collapse(t.hypotheses(0).text()));
    return out;
  }

  // The text without its whitespace: a <br> reads as a space when the translation is parsed
  // again, wherever the alignments put it.
  static std::string ink(const std::string& s) {
    std::string out;
    for (char c : s)
      if (!(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')) out += c;
    return out;
  }

  static std::string collapse(const std::string& s) {
    std::string out;
    for (char c : s) {
      const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
      if (!space) out += c;
      else if (!out.empty() && out.back() != ' ') out += ' ';
    }
    if (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  }

  static inline nmt::test::LoopbackServer* server_ = nullptr;
};

using nmt::markup::Block;

TEST_F(MarkupServer, GeneratedHtmlSnippetsComeBackValidWithEveryTagOnceAndThePlainTranslation) {
  nmt::markup::testing::HtmlSnippets gen;
  std::vector<std::string> snippets;
  for (int i = 0; i < 220; ++i) snippets.push_back(gen.snippet());
  int blocks = 0, spans = 0;
  for (std::size_t first = 0; first < snippets.size(); first += 20) {
    const std::vector<std::string> batch(snippets.begin() + first,
                                         snippets.begin() + std::min(first + 20, snippets.size()));
    nmt::v1::TranslateResponse response;
    const grpc::Status status = translate(batch, "html", &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.translations_size(), static_cast<int>(batch.size()));
    // The batch's blocks, translated as plain texts in one request.
    std::vector<std::unique_ptr<nmt::markup::MarkupDocument>> docs;
    std::vector<std::string> all;
    for (const std::string& source : batch) {
      docs.push_back(nmt::markup::parse_html(source, {}, "texts[0]"));
      for (const Block& b : docs.back()->blocks()) all.push_back(b.text);
    }
    const std::vector<std::string> all_plain = plain(all);
    ASSERT_EQ(all_plain.size(), all.size());
    std::size_t next = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::string& source = batch[i];
      const std::string out = response.translations(static_cast<int>(i)).hypotheses(0).text();
      SCOPED_TRACE("snippet: " + source + "\ntranslated: " + out);
      nmt::markup::testing::GumboTree in(source), back(out);
      ASSERT_EQ(in.output->errors.length, 0u);
      EXPECT_EQ(back.output->errors.length, 0u) << "the translation does not parse cleanly";
      std::multiset<std::string> in_elements, out_elements, in_kept, out_kept;
      nmt::markup::testing::inventory(in.output->root, false, in_elements, in_kept);
      nmt::markup::testing::inventory(back.output->root, false, out_elements, out_kept);
      EXPECT_EQ(out_elements, in_elements);
      EXPECT_EQ(out_kept, in_kept);
      // Each block's text (attributes included) is the plain translation of a source block
      // (whitespace aside).
      const auto& doc = docs[i];
      std::multiset<std::pair<std::string, std::size_t>> expected, got;
      for (const Block& b : doc->blocks()) {
        expected.insert({ink(all_plain[next++]), b.spans.size()});
        spans += static_cast<int>(b.spans.size());
      }
      const auto again = nmt::markup::parse_html(out, {}, "texts[0]");
      for (const Block& b : again->blocks()) got.insert({ink(b.text), b.spans.size()});
      EXPECT_EQ(got, expected);
      blocks += static_cast<int>(doc->blocks().size());
    }
  }
  EXPECT_GT(blocks, 500);
  EXPECT_GT(spans, 800);
}

std::map<std::string, int> markdown_nodes(const std::string& md, std::multiset<std::string>* kept) {
  std::map<std::string, int> nodes;
  cmark_node* root = cmark_parse_document(md.data(), md.size(), CMARK_OPT_DEFAULT);
  cmark_iter* it = cmark_iter_new(root);
  for (cmark_event_type ev; (ev = cmark_iter_next(it)) != CMARK_EVENT_DONE;) {
    cmark_node* n = cmark_iter_get_node(it);
    const cmark_node_type t = cmark_node_get_type(n);
    if (ev != CMARK_EVENT_ENTER || t == CMARK_NODE_TEXT || t == CMARK_NODE_SOFTBREAK) continue;
    const std::string html = t == CMARK_NODE_HTML_INLINE ? cmark_node_get_literal(n) : "";
    if (html == "<em>" || html == "<strong>") ++nodes[html == "<em>" ? "emph" : "strong"];
    if (html == "<em>" || html == "<strong>" || html == "</em>" || html == "</strong>") continue;
    ++nodes[cmark_node_get_type_string(n)];
    if (t == CMARK_NODE_LINK || t == CMARK_NODE_IMAGE) kept->insert(cmark_node_get_url(n));
    if (t == CMARK_NODE_CODE || t == CMARK_NODE_CODE_BLOCK) kept->insert(cmark_node_get_literal(n));
  }
  cmark_iter_free(it);
  cmark_node_free(root);
  return nodes;
}

TEST_F(MarkupServer, MarkdownKeepsItsStructureCodeAndUrls) {
  const std::vector<std::string> docs = {
      "# Two *dogs* play in the snow\n\nA man is riding a [bike](https://x.test/b_1?a=1&b=2). "
      "Two **dogs** play.\n\n```\ncode *kept*\n```\n",
      "- A *man* is riding a bike.\n- Two dogs play in the `snow`.\n\n> A woman is ![reading](r.png) a book.\n",
      "A man **is _riding_ a bike** in the snow.  \nTwo dogs play.\n"};
  nmt::v1::TranslateResponse response;
  const grpc::Status status = translate(docs, "markdown", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::string out = response.translations(static_cast<int>(i)).hypotheses(0).text();
    SCOPED_TRACE("document:\n" + docs[i] + "translated:\n" + out);
    std::multiset<std::string> in_kept, out_kept;
    EXPECT_EQ(markdown_nodes(out, &out_kept), markdown_nodes(docs[i], &in_kept));
    EXPECT_EQ(out_kept, in_kept);
    const auto doc = nmt::markup::parse_markdown(docs[i], {}, "texts[0]");
    std::vector<std::string> texts;
    for (const Block& b : doc->blocks()) texts.push_back(b.text);
    // Without whitespace: a code span keeps the space beside it where the placing moves it
    // ("im Hintergrund `snow`." reads back as "im Hintergrund .").
    std::multiset<std::string> expected, got;
    for (const std::string& t : plain(texts)) expected.insert(ink(t));
    const auto again = nmt::markup::parse_markdown(out, {}, "texts[0]");
    for (const Block& b : again->blocks()) got.insert(ink(b.text));
    EXPECT_EQ(got, expected);
  }
}

TEST_F(MarkupServer, BadInputIsRefusedWithItsReason) {
  nmt::v1::TranslateResponse response;
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "<div>";
  grpc::Status status = translate({"<p>fine</p>", deep + "deep"}, "html", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "texts[1]: HTML elements nest deeper than 30 (limits.max_markup_depth)");
  status = translate({std::string(40, '>') + " deep"}, "markdown", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "texts[0]: Markdown blocks and inlines nest deeper than 30 (limits.max_markup_depth)");
  status = translate({"<p>x</p>"}, "xml", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "options.format: \"xml\" is not a format (text, html or markdown)");
  status = translate({"<p>x</p>"}, "html", &response, 2);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "options.num_hypotheses: format html returns one translation per text (ask for 1)");
  // Unclosed tags are repaired (HTML5), and a text of markup only comes back as it was.
  status = translate({"<p>Two dogs <b>play in the snow.", "<br><img src=\"x.png\">"}, "html", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string repaired = response.translations(0).hypotheses(0).text();
  EXPECT_EQ(repaired.substr(0, 3), "<p>") << repaired;
  EXPECT_NE(repaired.find("<b>"), std::string::npos) << repaired;
  EXPECT_NE(repaired.find("</b>"), std::string::npos) << repaired;
  EXPECT_EQ(repaired.substr(repaired.size() - 4), "</p>") << repaired;
  EXPECT_EQ(response.translations(1).hypotheses(0).text(), "<br><img src=\"x.png\">");
}

}  // namespace
