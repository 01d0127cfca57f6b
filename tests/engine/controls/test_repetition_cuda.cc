// The repetition controls on the CUDA engine in float32: transformers' ids for every case of
// tests/conformance/controls/repetition, in one decode loop per model beside sentences without
// controls (the edited and unedited sentences share the top-k launches), each equal to its lone
// decode (tests/support/conformance/repetition_cases.h). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>

#include "model/config/weights.h"
#include "model/cuda_engine.h"
#include "model/translator.h"
#include "tests/support/conformance/repetition_cases.h"

using namespace nmt;

TEST(RepetitionControlsCuda, Float32MatchesTransformersInAMixedLoop) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not tested here";
  const std::vector<test::RepetitionCase> cases = test::load_repetition_cases();
  ASSERT_FALSE(cases.empty()) << test::repetition_references_path() << " holds no references";
  std::vector<std::unique_ptr<Weights>> weights;
  const test::RepetitionReport r =
      test::check_repetition_cases(cases, [&](const ModelConfig& config, const std::string& dir) {
        weights.push_back(std::make_unique<Weights>(Weights::load(dir, config)));
        TranslatorOptions o;
        o.device = Device::kCuda;
        o.precision = Precision::kFloat32;
        return make_cuda_engine(config, *weights.back(), o);
      });
  std::cout << "repetition controls (CUDA float32): " << r.matched << " / " << r.cases << " identical, "
            << r.changed << " changed by their controls\n";
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  EXPECT_EQ(r.matched, r.cases);
}
