// target_prefix and Score on the CUDA engine in float32 (docs/decoding.md): the references of
// tests/conformance/controls/prefix_score token-identical with scores within kScoreTolerance,
// as on the CPU (tests/model/conformance/test_prefix_score.cc), every case of a model in one decode loop
// whose steps follow each other on the device (StepGroup::follows). Skips, saying why,
// without a visible CUDA device.
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "model/cuda_engine.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance_cases.h"
#include "tests/support/conformance/prefix_score_cases.h"

using namespace nmt;

TEST(PrefixScoreCuda, MatchesTransformersInFloat32) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: target_prefix / Score not tested on the GPU";
  const std::vector<test::PrefixScoreCase> cases = test::load_prefix_score_cases();
  ASSERT_FALSE(cases.empty()) << test::prefix_score_references_path() << " holds no cases";
  std::map<std::string, std::vector<test::PrefixScoreCase>> by_model;
  for (const auto& c : cases) by_model[c.model_dir].push_back(c);
  for (const auto& [dir, list] : by_model) {
    TranslatorOptions o;
    o.device = Device::kCuda;
    o.precision = Precision::kFloat32;
    auto translator = Translator::load(dir, o);
    const test::PrefixScoreComparison r = test::compare_prefix_score(*translator, list);
    std::cout << list[0].model << " cuda float32: " << r.identical << " / " << r.cases
              << " identical, worst score error " << r.worst_score_error << " (" << r.worst_where << ")\n";
    EXPECT_EQ(r.identical, r.cases) << r.first_difference;
    EXPECT_LE(r.worst_score_error, test::kScoreTolerance) << list[0].model;
  }
}
