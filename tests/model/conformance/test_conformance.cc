// Conformance on the CPU engine (float32): every model of tests/conformance translates its
// references' sources exactly as transformers' generate() did (greedy, beam 4, 4-best lists:
// token-identical, scores to float32 rounding), from the tokenizer's own source ids. The model
// families (tests/conformance/families: NLLB-200, M2M-100, mBART-50 shapes) are decoded from
// the references' source ids through the engine and a decode loop directly, each sentence
// forcing its target language's token, sentences of different target languages in one batch.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/error.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/conformance/conformance_cases.h"

using namespace nmt;
using test::Search;

namespace {

struct Loaded {
  std::unique_ptr<Translator> translator;
  std::vector<test::GoldenSentence> refs;
  int max_decoding_length = 255;
};

// One load per model for its four tests.
Loaded& loaded(const test::ConformanceCase& c) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(c.name);
  if (it != cache.end()) return it->second;
  Loaded l;
  TranslatorOptions o;
  o.device = Device::kCpu;
  l.translator = Translator::load(c.model_dir, o);
  l.refs = test::load_references(c.references);
  l.max_decoding_length = test::reference_max_decoding_length(c.references);
  return cache[c.name] = std::move(l);
}

class Conformance : public ::testing::TestWithParam<test::ConformanceCase> {
 protected:
  void expect_exact(Search search) {
    Loaded& l = loaded(GetParam());
    ASSERT_FALSE(l.refs.empty()) << GetParam().references << " holds no references";
    const test::Comparison c = test::compare(*l.translator, l.refs, search, 16, l.max_decoding_length);
    std::cout << GetParam().name << " " << test::search_name(search) << ": " << c.identical << " / " << c.sentences
              << " identical, worst score error " << c.worst_score_error << "\n";
    EXPECT_EQ(c.identical, c.sentences) << c.first_difference;
    EXPECT_EQ(c.texts_differ, 0) << "identical ids, different text: " << c.first_text_difference;
    EXPECT_LE(c.worst_score_error, test::kScoreTolerance);
    EXPECT_EQ(c.malformed, 0) << c.first_malformed;
  }
};

}  // namespace

TEST_P(Conformance, SourceIdsAreTheTokenizers) {
  Loaded& l = loaded(GetParam());
  ASSERT_FALSE(l.refs.empty());
  size_t same = 0;
  for (const auto& g : l.refs) {
    const bool eq = l.translator->tokenizer().encode(g.source) == g.source_ids;
    if (!eq && same + 3 > &g - l.refs.data()) ADD_FAILURE() << "sentence " << g.id << ": " << g.source;
    same += eq;
  }
  std::cout << GetParam().name << " source ids: " << same << " / " << l.refs.size() << " identical\n";
  EXPECT_EQ(same, l.refs.size());
}

TEST_P(Conformance, GreedyIsExact) { expect_exact(Search::kGreedy); }
TEST_P(Conformance, Beam4IsExact) { expect_exact(Search::kBeam4); }
TEST_P(Conformance, FourBestListsAreExact) { expect_exact(Search::kFourBest); }

INSTANTIATE_TEST_SUITE_P(Models, Conformance, ::testing::ValuesIn(test::conformance_cases()),
                         [](const auto& info) { return test::case_test_name(info.param); });

namespace {

// One family variant on the CPU engine, float32 and int8, loaded once for its tests.
struct LoadedFamily {
  ModelConfig config;
  std::unique_ptr<Weights> weights;
  std::unique_ptr<Engine> float32, int8;
  std::vector<test::GoldenSentence> refs;
  std::vector<int> forced;  // each reference's target-language token
  int max_decoding_length = 255;
};

LoadedFamily& loaded_family(const std::string& variant) {
  static std::map<std::string, LoadedFamily> cache;
  auto it = cache.find(variant);
  if (it != cache.end()) return it->second;
  const std::string dir = test::conformance_dir() + "/families/" + variant;
  LoadedFamily l;
  l.config = ModelConfig::load(dir);
  l.weights = std::make_unique<Weights>(Weights::load(dir, l.config));
  l.float32 = make_cpu_engine(l.config, *l.weights, 0, 0, false);
  l.int8 = make_cpu_engine(l.config, *l.weights, 0, 0, true);
  l.refs = test::load_references(dir + "/references.jsonl");
  l.forced = test::target_language_ids(dir + "/references.jsonl", l.refs);
  l.max_decoding_length = test::reference_max_decoding_length(dir + "/references.jsonl");
  return cache[variant] = std::move(l);
}

test::Decoder engine_decoder(Engine& engine, const ModelConfig& config) {
  test::Decoder d;
  d.decode = [&engine, &config](const std::vector<std::vector<int>>& ids, const std::vector<DecodeOptions>& o) {
    return test::decode_ids(engine, config, ids, o);
  };
  d.eos_id = config.eos_id;
  d.with_texts = false;  // the tokenizers' own test checks decode(); here the engine's ids
  return d;
}

class FamilyConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void expect_exact(Search search) {
    LoadedFamily& l = loaded_family(GetParam());
    ASSERT_FALSE(l.refs.empty());
    const test::Comparison c =
        test::compare(engine_decoder(*l.float32, l.config), l.refs, search, 16, l.max_decoding_length, l.forced);
    std::cout << GetParam() << " " << test::search_name(search) << ": " << c.identical << " / " << c.sentences
              << " identical, worst score error " << c.worst_score_error << "\n";
    EXPECT_EQ(c.identical, c.sentences) << c.first_difference;
    EXPECT_LE(c.worst_score_error, test::kScoreTolerance);
    EXPECT_EQ(c.malformed, 0) << c.first_malformed;
  }
};

}  // namespace

TEST_P(FamilyConformance, GreedyIsExact) { expect_exact(Search::kGreedy); }
TEST_P(FamilyConformance, Beam4IsExact) { expect_exact(Search::kBeam4); }
TEST_P(FamilyConformance, FourBestListsAreExact) { expect_exact(Search::kFourBest); }

// int8 (per-row quantized weights) is not held to the references' tokens: its rate of
// identical beam-4 outputs is reported. What must hold: well-formed lists that start with the
// forced target-language token.
TEST_P(FamilyConformance, Int8AgreementIsReported) {
  LoadedFamily& l = loaded_family(GetParam());
  ASSERT_FALSE(l.refs.empty());
  const test::Comparison c =
      test::compare(engine_decoder(*l.int8, l.config), l.refs, Search::kBeam4, 16, l.max_decoding_length, l.forced);
  std::cout << GetParam() << " int8 beam4: " << c.identical << " / " << c.sentences << " identical to float32's "
            << "references\n";
  EXPECT_EQ(c.malformed, 0) << c.first_malformed;
  std::vector<std::vector<int>> sources;
  std::vector<DecodeOptions> options;
  for (size_t i = 0; i < l.refs.size(); ++i) {
    sources.push_back(l.refs[i].source_ids);
    options.push_back(test::search_options(Search::kGreedy, l.max_decoding_length));
    options.back().forced_bos_id = l.forced[i];
  }
  const std::vector<Translation> got = test::decode_ids(*l.int8, l.config, sources, options);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(got[i].hypotheses.empty());
    EXPECT_EQ(got[i].hypotheses[0].ids.at(0), l.forced[i]) << "sentence " << l.refs[i].id;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyConformance, ::testing::ValuesIn(test::conformance_families()),
                         [](const auto& info) { return test::case_test_name({info.param, "", ""}); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FamilyConformance);

// tests/conformance/refused/<name>: a model the loader refuses with a one-line error naming
// the config field of its meta.json ("refuse_field").
class Refused : public ::testing::TestWithParam<std::string> {};

TEST_P(Refused, LoadFailsNamingTheField) {
  const std::string dir = test::conformance_dir() + "/refused/" + GetParam();
  std::ifstream meta(dir + "/meta.json");
  const std::string field = nlohmann::json::parse(meta).at("refuse_field").get<std::string>();
  TranslatorOptions o;
  o.device = Device::kCpu;
  try {
    Translator::load(dir, o);
    ADD_FAILURE() << dir << " loaded; expected an error naming '" << field << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::cout << GetParam() << ": " << msg << "\n";
    EXPECT_NE(msg.find("'" + field + "'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Refused, ::testing::ValuesIn(test::conformance_refused()),
                         [](const auto& info) { return test::case_test_name({info.param, "", ""}); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Refused);
