// The repetition controls on the CPU engine (float32): no_repeat_ngram_size,
// repetition_penalty and suppress_sequences give transformers' ids (greedy and beam 4, the
// references of tests/conformance/controls/repetition), every model's cases sharing one
// decode loop with each other and with sentences without controls, each equal to its lone
// decode (tests/support/conformance/repetition_cases.h); and the CPU engine refuses the device's controls.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>

#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/error.h"
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

// The CPU engine takes the host's edits for every control (Engine::repetition_on_device()
// false): a group that asks it to compute no_repeat_ngram_size or repetition_penalty itself
// (StepGroup) is refused, never ignored.
TEST(RepetitionControls, CpuEngineRefusesTheDevicesControls) {
  const std::vector<test::RepetitionCase> cases = test::load_repetition_cases();
  ASSERT_FALSE(cases.empty()) << test::repetition_references_path() << " holds no references";
  const ModelConfig config = ModelConfig::load(cases[0].model_dir);
  const Weights weights = Weights::load(cases[0].model_dir, config);
  std::unique_ptr<Engine> engine = make_cpu_engine(config, weights, 0, 0, false);
  EXPECT_FALSE(engine->repetition_on_device());
  engine->reserve({1, 1, 8});
  const std::vector<int> source{5, config.eos_id};
  engine->encode({{&source, 0}});
  for (int control = 0; control < 2; ++control) {
    StepInput in;
    in.groups.push_back({0, 0, 1, 1, false, false, -1, -1});
    if (control == 0) in.groups[0].no_repeat_ngram_size = 3;
    else in.groups[0].repetition_penalty = 1.2f;
    in.tokens = {config.decoder_start_id};
    in.cache_rows = {0};
    in.parent_rows = {0};
    in.running_scores = {0.f};
    StepOutput out;
    try {
      engine->step(in, &out);
      ADD_FAILURE() << "the CPU engine took a group with the device's controls";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInternal);
      EXPECT_NE(std::string(e.what()).find("repetition controls"), std::string::npos) << e.what();
    }
  }
}
