// A request's glossary and each sentence's phrases, without a model (a stand-in target
// tokenizer): whole-word, case-sensitive matching (model/text/glossary.h), the model's entries
// first, each target term once, the checks naming options.glossary[i] and the limits, the
// glossary file's format and its refusals naming file and line.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <unistd.h>

#include "model/error.h"
#include "server/glossary/request_glossary.h"

using namespace nmt;
using namespace nmt::server;

namespace {

// One id per character: enough to tell terms apart.
std::vector<int> fake_target(const std::string& text) {
  std::vector<int> ids;
  for (unsigned char c : text) ids.push_back(int(c));
  return ids;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

v1::TranslateOptions with_entries(const std::vector<std::pair<std::string, std::string>>& entries) {
  v1::TranslateOptions o;
  for (const auto& [s, t] : entries) {
    v1::GlossaryEntry* e = o.add_glossary();
    e->set_source(s);
    e->set_target(t);
  }
  return o;
}

}  // namespace

TEST(GlossaryMatching, WholeWordsCaseSensitive) {
  EXPECT_TRUE(occurs_as_words("A dog runs.", "dog"));
  EXPECT_TRUE(occurs_as_words("dog", "dog"));
  EXPECT_TRUE(occurs_as_words("(dog)", "dog"));
  EXPECT_FALSE(occurs_as_words("A hotdog stand.", "dog"));
  EXPECT_FALSE(occurs_as_words("Dogs run.", "dog"));
  EXPECT_FALSE(occurs_as_words("A Dog runs.", "dog"));
  EXPECT_FALSE(occurs_as_words("dogs run.", "dog"));
  EXPECT_TRUE(occurs_as_words("dogs and a dog", "dog"));  // a later occurrence counts
  EXPECT_TRUE(occurs_as_words("Ein Äpfel-Baum", "Äpfel"));
  EXPECT_FALSE(occurs_as_words("Ein Äpfelbaum", "Äpfel"));
  EXPECT_FALSE(occurs_as_words("Ein Bäpfel", "äpfel"));  // a letter (ä: two bytes) before
  EXPECT_TRUE(occurs_as_words("I like C++ a lot", "C++"));
  EXPECT_TRUE(occurs_as_words("New York City", "New York"));
  EXPECT_FALSE(occurs_as_words("New Yorker", "New York"));
}

TEST(RequestGlossary, PhrasesPerSentenceModelFirstEachTermOnce) {
  const std::vector<GlossaryEntry> model = {{"dog", "Welpe"}, {"park", "Grünanlage"}};
  const std::vector<GlossaryEntry> request = {{"park", "Stadtpark"}, {"men", "Herren"}, {"dog", "Welpe"}};
  DecodeOptions o;
  const auto p = sentence_phrases(model, request, {"A dog in the park.", "Two men.", "Nothing here."}, fake_target, o);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (std::vector<std::vector<int>>{fake_target("Welpe"), fake_target("Grünanlage"), fake_target("Stadtpark")}));
  EXPECT_EQ(p[1], (std::vector<std::vector<int>>{fake_target("Herren")}));
  EXPECT_TRUE(p[2].empty());
  // none applies anywhere: no phrases at all (the plain search for every sentence)
  EXPECT_TRUE(sentence_phrases(model, request, {"Nothing.", "Hotdogs."}, fake_target, o).empty());
}

TEST(RequestGlossary, RefusalsNameTheField) {
  Limits limits;
  limits.max_glossary_entries = 2;
  limits.max_glossary_term_characters = 5;
  EXPECT_EQ(error_of([&] { request_glossary(with_entries({{"", "x"}}), limits); }), "options.glossary[0].source is empty");
  EXPECT_EQ(error_of([&] { request_glossary(with_entries({{"a", "b"}, {"c", "  "}}), limits); }),
            "options.glossary[1].target is empty");
  EXPECT_EQ(error_of([&] { request_glossary(with_entries({{"a", "b"}, {"c", "d"}, {"e", "f"}}), limits); }),
            "options.glossary holds 3 entries; at most 2 are accepted (limits.max_glossary_entries)");
  EXPECT_EQ(error_of([&] { request_glossary(with_entries({{"a", "äääääää"}}), limits); }),
            "options.glossary[0].target has 7 characters; at most 5 (limits.max_glossary_term_characters)");
  EXPECT_EQ(request_glossary(with_entries({{"a", "b"}}), limits).size(), 1u);
  // checked as the search will be: terms that do not fit max_decoding_length, sampling
  DecodeOptions o;
  o.max_decoding_length = 4;
  EXPECT_NE(error_of([&] { sentence_phrases({}, {{"dog", "Welpe"}}, {"A dog."}, fake_target, o); })
                .find("options.glossary: the required target terms of a sentence take 5 tokens"),
            std::string::npos);
  DecodeOptions s;
  s.beam_size = 1;
  s.sampling_topk = 0;
  EXPECT_NE(error_of([&] { sentence_phrases({{"dog", "Welpe"}}, {}, {"A dog."}, fake_target, s); })
                .find("ignore_model_glossary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sentence_phrases({}, {{"dog", "Welpe"}}, {"A dog."},
                                            [](const std::string&) { return std::vector<int>{}; }, DecodeOptions{}); })
                .find("options.glossary[0].target \"Welpe\" has no target tokens"),
            std::string::npos);
}

TEST(GlossaryFile, FormatAndRefusals) {
  const std::string path = "/tmp/nmt-glossary-test-" + std::to_string(::getpid()) + ".tsv";
  auto write = [&](const std::string& text) {
    std::ofstream f(path);
    f << text;
  };
  write("# comment\n\ndog\tWelpe\r\nNew York\tNew York City\n");
  const std::vector<GlossaryEntry> g = load_glossary_file(path);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].source, "dog");
  EXPECT_EQ(g[0].target, "Welpe");
  EXPECT_EQ(g[1].target, "New York City");
  write("dog\tWelpe\nno tab here\n");
  EXPECT_EQ(error_of([&] { load_glossary_file(path); }), path + ":2: expected source<TAB>target (exactly one tab)");
  write("dog\t\n");
  EXPECT_EQ(error_of([&] { load_glossary_file(path); }), path + ":1: an empty term");
  write("d\xffg\tx\n");
  EXPECT_EQ(error_of([&] { load_glossary_file(path); }), path + ":1: not UTF-8");
  std::remove(path.c_str());
  EXPECT_NE(error_of([&] { load_glossary_file(path); }).find("cannot be read"), std::string::npos);
}
