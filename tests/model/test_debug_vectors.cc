// The encoder output and first decoder step against the transformers debug vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/cpu_engine.h"
#include "model/weights.h"
#include "tests/support/golden.h"

using namespace nmt;

TEST(DebugVectors, EncoderOutputAndFirstStepLogProbs) {
  const std::string path = test::golden_dir() + "/debug_vectors.json";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "debug vectors absent: " << path;
  const auto cases = nlohmann::json::parse(in);
  ASSERT_EQ(cases.size(), 3u);
  const auto config = ModelConfig::load(test::demo_model_dir());
  const auto weights = Weights::load(test::demo_model_dir(), config);
  auto engine = make_cpu_engine(config, weights);
  for (const auto& c : cases) {
    const auto ids = c.at("source_ids").get<std::vector<int>>();
    engine->encode({ids}, 1);
    const auto enc = engine->encoder_output(0);
    ASSERT_EQ(enc.size(), ids.size() * size_t(config.d_model));
    const auto first8 = c.at("encoder_out_first8").get<std::vector<float>>();
    for (size_t i = 0; i < first8.size(); ++i) EXPECT_NEAR(enc[i], first8[i], 1e-4) << "element " << i;
    double sum = 0, abs_sum = 0;
    for (float v : enc) {
      sum += v;
      abs_sum += std::fabs(v);
    }
    // The sums cover every element: their differences, per element, stay within 1e-4.
    const double n = double(enc.size());
    EXPECT_NEAR(sum / n, c.at("encoder_out_sum").get<double>() / n, 1e-4);
    EXPECT_NEAR(abs_sum / n, c.at("encoder_out_abs_sum").get<double>() / n, 1e-4);

    const std::vector<int> tokens{config.decoder_start_id};
    const std::vector<float> running{0.f};
    StepInput step;
    step.tokens = &tokens;
    step.running_scores = &running;
    step.k = 10;
    StepOutput out;
    engine->step(step, &out);
    const auto top_ids = c.at("step1_top10_ids").get<std::vector<int>>();
    const auto top_lp = c.at("step1_top10_logprobs").get<std::vector<float>>();
    for (int j = 0; j < 10; ++j) {
      EXPECT_EQ(out.candidates[size_t(j)], top_ids[size_t(j)]) << "rank " << j;
      EXPECT_NEAR(out.scores[size_t(j)], top_lp[size_t(j)], 1e-4) << "rank " << j;
    }
  }
}

// The step masks follow transformers' logits processors: pad is never generated, EOS is
// masked before min_length, and at max_length EOS is forced with log-prob 0.
TEST(CpuEngineStep, MasksFollowTransformersProcessors) {
  const auto config = ModelConfig::load(test::demo_model_dir());
  const auto weights = Weights::load(test::demo_model_dir(), config);
  auto engine = make_cpu_engine(config, weights);
  engine->encode({{5, 17, 4, 24, 168, 2, 0}}, 1);
  const std::vector<int> tokens{config.decoder_start_id};
  const std::vector<float> running{-1.5f};
  StepInput step;
  step.tokens = &tokens;
  step.running_scores = &running;
  step.k = 3;
  StepOutput out;
  step.force_eos = true;
  engine->step(step, &out);
  EXPECT_EQ(out.candidates[0], config.eos_id);
  EXPECT_FLOAT_EQ(out.scores[0], -1.5f);  // running score + log-prob 0
  EXPECT_TRUE(std::isinf(out.scores[1]) && out.scores[1] < 0);

  engine->encode({{5, 17, 4, 24, 168, 2, 0}}, 1);
  step.force_eos = false;
  step.mask_eos = true;
  step.k = config.vocab_size;
  engine->step(step, &out);
  for (int j = 0; j < config.vocab_size; ++j) {
    if (out.candidates[size_t(j)] == config.eos_id || out.candidates[size_t(j)] == config.pad_id) {
      EXPECT_TRUE(std::isinf(out.scores[size_t(j)])) << "token " << out.candidates[size_t(j)];
    } else {
      EXPECT_TRUE(std::isfinite(out.scores[size_t(j)]));
    }
  }
}
