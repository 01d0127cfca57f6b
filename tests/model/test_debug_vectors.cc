// The encoder output and first decoder step against the transformers debug vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

// Encodes one sentence into slot 0 and runs the first decoder step of one row.
StepOutput first_step(Engine& engine, const ModelConfig& config, const std::vector<int>& ids, int k,
                      float running = 0.f, bool mask_eos = false, bool force_eos = false) {
  engine.reserve({1, 1, int(ids.size())});
  engine.encode({{&ids, 0}});
  StepInput step;
  step.groups = {{/*slot=*/0, /*position=*/0, /*beam=*/1, k, mask_eos, force_eos}};
  step.tokens = {config.decoder_start_id};
  step.cache_rows = step.parent_rows = {0};
  step.running_scores = {running};
  StepOutput out;
  engine.step(step, &out);
  return out;
}

}  // namespace

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
    const StepOutput out = first_step(*engine, config, ids, 10);
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
  const std::vector<int> ids{5, 17, 4, 24, 168, 2, 0};
  StepOutput out = first_step(*engine, config, ids, 3, -1.5f, false, /*force_eos=*/true);
  EXPECT_EQ(out.candidates[0], config.eos_id);
  EXPECT_FLOAT_EQ(out.scores[0], -1.5f);  // running score + log-prob 0
  EXPECT_TRUE(std::isinf(out.scores[1]) && out.scores[1] < 0);

  out = first_step(*engine, config, ids, config.vocab_size, -1.5f, /*mask_eos=*/true);
  for (int j = 0; j < config.vocab_size; ++j) {
    if (out.candidates[size_t(j)] == config.eos_id || out.candidates[size_t(j)] == config.pad_id) {
      EXPECT_TRUE(std::isinf(out.scores[size_t(j)])) << "token " << out.candidates[size_t(j)];
    } else {
      EXPECT_TRUE(std::isfinite(out.scores[size_t(j)]));
    }
  }
}
