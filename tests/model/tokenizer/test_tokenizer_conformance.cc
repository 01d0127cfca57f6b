// The fairseq-dictionary tokenizers against transformers 5.17 (tests/conformance/families/
// <variant>/tokenizer.jsonl, written by tools/make_conformance.py on the GPU machine): every
// encode record id for id, in its source language, and every decode record text for text
// (decode(ids, skip_special_tokens=True)); and the model's language codes are those the
// records cover.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/config/model_config.h"
#include "model/error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

std::string show(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace

class TokenizerConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerConformance, IdsAndTextsAsTransformers) {
  const std::string dir = test::conformance_dir() + "/families/" + GetParam();
  const ModelConfig config = ModelConfig::load(dir);
  const auto tok = Tokenizer::load(dir, config);
  std::ifstream in(dir + "/tokenizer.jsonl");
  int encodes = 0, decodes = 0, wrong = 0;
  std::set<std::string> languages;
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    const std::string kind = r.at("kind"), name = r.value("case", "");
    const auto ids = r.at("ids").get<std::vector<int>>();
    if (kind == "encode") {
      ++encodes;
      const std::string lang = r.at("language"), text = r.at("text");
      languages.insert(lang);
      const std::vector<int> got = tok->encode(text, lang);
      if (got != ids && ++wrong <= 20) {
        ADD_FAILURE() << GetParam() << " encode '" << name << "' in " << lang << ": " << show(got)
                      << "\n  transformers: " << show(ids);
      }
    } else if (kind == "decode") {
      ++decodes;
      const std::string got = tok->decode(ids), want = r.at("text");
      if (got != want && ++wrong <= 20) {
        ADD_FAILURE() << GetParam() << " decode '" << name << "' " << show(ids) << ": '" << got
                      << "'\n  transformers: '" << want << "'";
      }
    } else {
      ADD_FAILURE() << "unknown record kind '" << kind << "'";
    }
  }
  EXPECT_GT(encodes, 0);
  EXPECT_GT(decodes, 0);
  EXPECT_EQ(wrong, 0) << "of " << encodes << " encode and " << decodes << " decode records";
  const std::set<std::string> codes(tok->languages().begin(), tok->languages().end());
  EXPECT_EQ(codes, languages) << "the model's language codes and those the records cover";
}

// The model references (references.jsonl): each source's ids in its source language, and the
// text of every generated hypothesis (the forced language token first) from its ids.
TEST_P(TokenizerConformance, ReferenceSourcesAndHypothesisTexts) {
  const std::string dir = test::conformance_dir() + "/families/" + GetParam();
  const ModelConfig config = ModelConfig::load(dir);
  const auto tok = Tokenizer::load(dir, config);
  std::ifstream in(dir + "/references.jsonl");
  int sources = 0, texts = 0, wrong = 0;
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    ++sources;
    const std::vector<int> got = tok->encode(r.at("source"), r.at("source_language"));
    if (got != r.at("source_ids").get<std::vector<int>>() && ++wrong <= 10) {
      ADD_FAILURE() << GetParam() << " reference " << r.at("id") << " source: " << show(got);
    }
    std::vector<nlohmann::json> hyps{r.at("greedy"), r.at("beam4")};
    for (const auto& h : r.at("nbest4")) hyps.push_back(h);
    for (const auto& h : hyps) {
      ++texts;
      const std::string text = tok->decode(h.at("ids").get<std::vector<int>>());
      if (text != h.at("text").get<std::string>() && ++wrong <= 10) {
        ADD_FAILURE() << GetParam() << " reference " << r.at("id") << ": '" << text << "'\n  transformers: '"
                      << h.at("text").get<std::string>() << "'";
      }
    }
  }
  EXPECT_GT(sources, 0);
  EXPECT_EQ(wrong, 0) << "of " << sources << " sources and " << texts << " hypothesis texts";
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerConformance, ::testing::ValuesIn(test::conformance_families()),
                         [](const auto& info) { return info.param; });
// Until the generated families are committed the suite has no instances.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TokenizerConformance);
