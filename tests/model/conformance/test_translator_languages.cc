// Translator's languages per request on the generated model families (tests/conformance/
// families): translate(sources, options, stats, {source, target}) from the text, with the
// target named by its ISO 639-1 alias where that is unambiguous, gives transformers' beam-4
// ids and text; a target-less request on a model without a default is refused naming
// target_language.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "model/error.h"
#include "model/tokenizer/languages.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

// Another name a client could use for `code`: its ISO 639-1 alias, else its FLORES-200
// code, where the model resolves it back to `code`; else the code.
std::string alias_of(const std::string& code, const std::vector<std::string>& codes) {
  const LanguageInfo info = describe_language(code);
  for (const std::string& name : {info.iso639_1, info.iso639_3 + "_" + info.script}) {
    if (name.empty() || name == code || info.iso639_3.empty()) continue;
    try {
      if (resolve_language(name, codes) == code) return name;
    } catch (const Error&) {
    }
  }
  return code;
}

}  // namespace

class TranslatorLanguages : public ::testing::TestWithParam<std::string> {};

TEST_P(TranslatorLanguages, RequestedLanguagesGiveTransformersBeam4) {
  const std::string dir = test::conformance_dir() + "/families/" + GetParam();
  TranslatorOptions o;
  o.device = Device::kCpu;
  o.precision = Precision::kFloat32;
  const auto t = Translator::load(dir, o);
  const auto& codes = t->tokenizer().languages();
  const DecodeOptions beam4 =
      test::search_options(test::Search::kBeam4, test::reference_max_decoding_length(dir + "/references.jsonl"));
  // The references grouped by language pair: one translate() call per pair.
  std::map<std::pair<std::string, std::string>, std::vector<nlohmann::json>> by_pair;
  std::ifstream in(dir + "/references.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto r = nlohmann::json::parse(line);
    by_pair[{r.at("source_language"), r.at("target_language")}].push_back(r);
  }
  int sentences = 0, same = 0, aliased = 0;
  for (const auto& [languages, refs] : by_pair) {
    const LanguagePair pair{languages.first, alias_of(languages.second, codes)};
    aliased += pair.target != languages.second;
    std::vector<std::string> sources;
    for (const auto& r : refs) sources.push_back(r.at("source"));
    const auto out = t->translate(sources, beam4, nullptr, pair);
    for (size_t i = 0; i < refs.size(); ++i) {
      ++sentences;
      const Hypothesis& h = out.at(i).hypotheses.at(0);
      const auto& want = refs[i].at("beam4");
      if (h.ids == want.at("ids").get<std::vector<int>>() && h.text == want.at("text")) {
        ++same;
      } else if (sentences - same <= 3) {
        ADD_FAILURE() << GetParam() << " reference " << refs[i].at("id") << " (" << pair.source << " -> "
                      << pair.target << "): '" << h.text << "'\n  transformers: '" << want.at("text").get<std::string>()
                      << "'";
      }
    }
  }
  EXPECT_GT(sentences, 0);
  EXPECT_GT(aliased, 0) << "no target was named by an alias";
  EXPECT_EQ(same, sentences);
}

TEST_P(TranslatorLanguages, TargetLanguageRequiredWithoutADefault) {
  const std::string dir = test::conformance_dir() + "/families/" + GetParam();
  TranslatorOptions o;
  o.device = Device::kCpu;
  const auto t = Translator::load(dir, o);
  if (t->config().forced_bos_id >= 0) GTEST_SKIP() << "the model names a default target (forced_bos_token_id)";
  try {
    t->translate({"A man."}, DecodeOptions{}, nullptr, {});
    FAIL() << "translated without a target language";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("target_language"), std::string::npos) << e.what();
  }
  try {
    t->target_token("tlh");
    FAIL() << "resolved Klingon";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target_language: language 'tlh'"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TranslatorLanguages, ::testing::ValuesIn(test::conformance_families()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TranslatorLanguages);
