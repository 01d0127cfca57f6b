// The repetition controls on the CPU engine (float32): no_repeat_ngram_size,
// repetition_penalty and suppress_sequences give transformers' ids (greedy and beam 4, the
// references of tests/conformance/controls/repetition), every model's cases sharing one
// decode loop with each other and with sentences without controls, each equal to its lone
// decode (tests/support/conformance/repetition_cases.h).
#include <gtest/gtest.h>

#include <iostream>
#include <memory>

#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "tests/support/conformance/repetition_cases.h"

using namespace nmt;

TEST(RepetitionControls, CpuEngineMatchesTransformersInAMixedLoop) {
  const std::vector<test::RepetitionCase> cases = test::load_repetition_cases();
  ASSERT_FALSE(cases.empty()) << test::repetition_references_path() << " holds no references";
  std::vector<std::unique_ptr<Weights>> weights;
  const test::RepetitionReport r =
      test::check_repetition_cases(cases, [&](const ModelConfig& config, const std::string& dir) {
        weights.push_back(std::make_unique<Weights>(Weights::load(dir, config)));
        return make_cpu_engine(config, *weights.back(), 0, 0, false);
      });
  std::cout << "repetition controls (CPU float32): " << r.matched << " / " << r.cases << " identical, "
            << r.changed << " changed by their controls\n";
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  EXPECT_EQ(r.matched, r.cases);
  // the references must exercise the controls, not only pass through them
  EXPECT_GE(r.changed * 2, r.cases) << "fewer than half the cases change with their controls";
}
