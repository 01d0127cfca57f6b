// Conformance on the CUDA engine: every model of tests/conformance against transformers'
// generate() (greedy, beam 4, 4-best lists). float32 must be token-identical, as on the CPU.
// float16 rounds differently from the float32 references, so it must be identical on at least
// 95% of the sentences of each search: per model on the trained demo model, pooled over the
// random-weight variants (whose choices are less clear than a trained model's: 90-100% per
// variant and search when the variants were generated), where each variant must still reach
// 80% (a float16 fault in one variant's path, an activation or an untied output layer, falls far
// below that) and give well-formed n-best lists. The model families (tests/conformance/families:
// NLLB-200, M2M-100, mBART-50 shapes) are held to the same bars, decoded from the references'
// source ids through the engine and a decode loop, each sentence forcing its target language's
// token, sentences of different target languages in one batch (as the CPU's test_conformance).
// Skips, saying why, without a visible CUDA device.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <memory>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cuda_engine.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/conformance/conformance_cases.h"

using namespace nmt;
using test::Search;

namespace {

constexpr double kFloat16Identical = 0.95;
constexpr double kFloat16VariantFloor = 0.80;

bool have_cuda() { return cuda_device_count() > 0; }
constexpr const char* kNoCuda = "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not tested here";

// The comparison of one model in one precision, each search printed as it goes.
std::map<Search, test::Comparison> compare_all(const test::ConformanceCase& c, Precision precision) {
  const auto refs = test::load_references(c.references);
  EXPECT_FALSE(refs.empty()) << c.references << " holds no references";
  const int max_len = test::reference_max_decoding_length(c.references);
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = precision;
  auto translator = Translator::load(c.model_dir, o);
  std::map<Search, test::Comparison> out;
  for (Search s : {Search::kGreedy, Search::kBeam4, Search::kFourBest}) {
    const test::Comparison r = test::compare(*translator, refs, s, 64, max_len);
    std::cout << c.name << " " << precision_name(precision) << " " << test::search_name(s) << ": " << r.identical
              << " / " << r.sentences << " identical (" << 100.0 * r.identical / r.sentences
              << "%), worst score error " << r.worst_score_error << "\n";
    EXPECT_EQ(r.malformed, 0) << r.first_malformed;
    out[s] = r;
  }
  return out;
}

class ConformanceCuda : public ::testing::TestWithParam<test::ConformanceCase> {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << kNoCuda;
  }
};

}  // namespace

TEST_P(ConformanceCuda, Float32IsExact) {
  for (const auto& [search, r] : compare_all(GetParam(), Precision::kFloat32)) {
    EXPECT_EQ(r.identical, r.sentences) << r.first_difference;
    EXPECT_LE(r.worst_score_error, test::kScoreTolerance);
    EXPECT_EQ(r.texts_differ, 0) << "identical ids, different text: " << r.first_text_difference;
  }
}

TEST_P(ConformanceCuda, Float16MostlyIdentical) {
  const test::ConformanceCase& c = GetParam();
  const double bar = c.random_weights ? kFloat16VariantFloor : kFloat16Identical;
  for (const auto& [search, r] : compare_all(c, Precision::kFloat16)) {
    EXPECT_GE(r.identical, bar * r.sentences) << test::search_name(search) << ": " << r.first_difference;
    EXPECT_EQ(r.texts_differ, 0) << "identical ids, different text: " << r.first_text_difference;
  }
}

// float16 on the random-weight variants: 95% of all their sentences, per search.
TEST(ConformanceCudaVariants, Float16IdenticalPooled) {
  if (!have_cuda()) GTEST_SKIP() << kNoCuda;
  std::map<Search, std::pair<int, int>> pooled;  // search -> (identical, sentences)
  int variants = 0;
  for (const test::ConformanceCase& c : test::conformance_cases()) {
    if (!c.random_weights) continue;
    ++variants;
    for (const auto& [search, r] : compare_all(c, Precision::kFloat16)) {
      pooled[search].first += r.identical;
      pooled[search].second += r.sentences;
    }
  }
  ASSERT_GE(variants, 6) << "tests/conformance/models holds fewer variants than the suite's 6";
  for (const auto& [search, n] : pooled) {
    std::cout << "variants pooled float16 " << test::search_name(search) << ": " << n.first << " / " << n.second
              << " identical\n";
    EXPECT_GE(n.first, kFloat16Identical * n.second) << test::search_name(search);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ConformanceCuda, ::testing::ValuesIn(test::conformance_cases()),
                         [](const auto& info) { return test::case_test_name(info.param); });

namespace {

// One family variant's references and weights, loaded once; its engines are made per test.
struct LoadedFamily {
  ModelConfig config;
  std::unique_ptr<Weights> weights;
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
  l.refs = test::load_references(dir + "/references.jsonl");
  l.forced = test::target_language_ids(dir + "/references.jsonl", l.refs);
  l.max_decoding_length = test::reference_max_decoding_length(dir + "/references.jsonl");
  return cache[variant] = std::move(l);
}

// The family variant's three searches on a CUDA engine of that precision, each printed.
std::map<Search, test::Comparison> compare_family(const std::string& variant, Precision precision) {
  LoadedFamily& l = loaded_family(variant);
  EXPECT_FALSE(l.refs.empty()) << variant << " holds no references";
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = precision;
  std::unique_ptr<Engine> engine = make_cuda_engine(l.config, *l.weights, o);
  test::Decoder d;
  d.decode = [&](const std::vector<std::vector<int>>& ids, const std::vector<DecodeOptions>& options) {
    return test::decode_ids(*engine, l.config, ids, options);
  };
  d.eos_id = l.config.eos_id;
  d.with_texts = false;  // the tokenizers' own test checks decode(); here the engine's ids
  std::map<Search, test::Comparison> out;
  for (Search s : {Search::kGreedy, Search::kBeam4, Search::kFourBest}) {
    const test::Comparison r = test::compare(d, l.refs, s, 16, l.max_decoding_length, l.forced);
    std::cout << variant << " " << precision_name(precision) << " " << test::search_name(s) << ": " << r.identical
              << " / " << r.sentences << " identical (" << 100.0 * r.identical / r.sentences
              << "%), worst score error " << r.worst_score_error << "\n";
    EXPECT_EQ(r.malformed, 0) << r.first_malformed;
    out[s] = r;
  }
  return out;
}

class FamilyConformanceCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << kNoCuda;
  }
};

}  // namespace

TEST_P(FamilyConformanceCuda, Float32IsExact) {
  for (const auto& [search, r] : compare_family(GetParam(), Precision::kFloat32)) {
    EXPECT_EQ(r.identical, r.sentences) << test::search_name(search) << ": " << r.first_difference;
    EXPECT_LE(r.worst_score_error, test::kScoreTolerance) << test::search_name(search);
  }
}

// Each family variant is random-weight: held to the variants' floor, and pooled below.
TEST_P(FamilyConformanceCuda, Float16MostlyIdentical) {
  for (const auto& [search, r] : compare_family(GetParam(), Precision::kFloat16))
    EXPECT_GE(r.identical, kFloat16VariantFloor * r.sentences) << test::search_name(search) << ": " << r.first_difference;
}

// float16 over all the family variants: 95% of their sentences identical in greedy and beam-4
// search. Their 4-best lists are reported, and held to the variants' floor by
// Float16MostlyIdentical: in 202 of the family references' 252 lists two consecutive
// hypotheses score within 0.005 of each other, the size of float16's score error on these
// models (a few thousandths), so float16 reorders lists that float32 keeps.
TEST(FamilyConformanceCudaPooled, Float16IdenticalPooled) {
  if (!have_cuda()) GTEST_SKIP() << kNoCuda;
  const std::vector<std::string> families = test::conformance_families();
  if (families.empty()) GTEST_SKIP() << "tests/conformance/families holds no variants";
  std::map<Search, std::pair<int, int>> pooled;  // search -> (identical, sentences)
  for (const std::string& variant : families) {
    for (const auto& [search, r] : compare_family(variant, Precision::kFloat16)) {
      pooled[search].first += r.identical;
      pooled[search].second += r.sentences;
    }
  }
  for (const auto& [search, n] : pooled) {
    std::cout << "families pooled float16 " << test::search_name(search) << ": " << n.first << " / " << n.second
              << " identical\n";
    if (search != Search::kFourBest) EXPECT_GE(n.first, kFloat16Identical * n.second) << test::search_name(search);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyConformanceCuda, ::testing::ValuesIn(test::conformance_families()),
                         [](const auto& info) { return test::case_test_name({info.param, "", ""}); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FamilyConformanceCuda);
