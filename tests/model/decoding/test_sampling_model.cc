// Sampling on the CPU engine with a real model (the conformance model swish_tied: 706 tokens,
// final_logits_bias, pad banned): the first token's frequencies over fixed seeds against the
// softmax of the engine's own first-step logits, warped as transformers does (chi-square at
// significance 1e-4: deterministic, as the seeds are fixed); top-k 1 and temperature 0 equal
// greedy; each seeded sentence of a mixed load (sampling, greedy and beam sentences in one
// decode loop) equals its lone run.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"
#include "tests/support/sampling_checks.h"
#include "tests/support/sampling_reference.h"

using namespace nmt;
using namespace nmt::test;

namespace {

struct Model {
  std::string dir = conformance_dir() + "/models/swish_tied";
  ModelConfig config = ModelConfig::load(dir);
  Weights weights = Weights::load(dir, config);
  std::unique_ptr<Engine> engine = make_cpu_engine(config, weights);
  std::vector<GoldenSentence> refs = load_references(dir + "/references.jsonl");
};

Model& model() {
  static Model m;
  return m;
}

}  // namespace

TEST(SamplingModel, FirstTokenFrequenciesMatchTheWarpedSoftmax) {
  Model& m = model();
  const std::vector<int>& source = m.refs.at(0).source_ids;
  const std::vector<float> logits = first_step_logits(*m.engine, m.config, source);
  ASSERT_EQ(logits.size(), size_t(m.engine->vocab_size()));
  const int n = 20000;
  for (const SamplingParams& p : {SamplingParams{0, 1.f, 1.f}, SamplingParams{0, 1.f, 0.5f},
                                  SamplingParams{30, 0.9f, 1.3f}}) {
    SCOPED_TRACE("topk " + std::to_string(p.topk) + " topp " + std::to_string(p.topp) + " temperature " +
                 std::to_string(p.temperature));
    const std::vector<double> expected = warped_softmax(logits, first_step_masks(m.config), p);
    const ChiSquare c = chi_square(first_token_counts(*m.engine, m.config, source, p, n), expected, n);
    std::cout << "chi-square " << c.statistic << " over " << c.bins << " bins (critical "
              << chi_square_critical(c.bins - 1) << ")\n";
    EXPECT_GT(c.bins, 10);
    EXPECT_LT(c.statistic, chi_square_critical(c.bins - 1));
    EXPECT_EQ(c.outside, 0) << "first tokens the masks or warpers exclude";
  }
}

TEST(SamplingModel, TopKOneAndTemperatureZeroEqualGreedy) {
  Model& m = model();
  std::vector<std::vector<int>> sources;
  for (size_t i = 0; i < 16 && i < m.refs.size(); ++i) sources.push_back(m.refs[i].source_ids);
  DecodeOptions greedy;
  greedy.beam_size = 1;
  DecodeOptions topk1 = sampling_options({1, 0.5f, 2.f}, 1), cold = sampling_options({0, 1.f, 0.f}, 1);
  const int max_length = reference_max_decoding_length(m.dir + "/references.jsonl");  // transformers' run
  for (DecodeOptions* o : {&greedy, &topk1, &cold}) o->max_decoding_length = max_length;
  const auto g = decode_ids(*m.engine, m.config, sources, std::vector<DecodeOptions>(sources.size(), greedy));
  const auto k = decode_ids(*m.engine, m.config, sources, std::vector<DecodeOptions>(sources.size(), topk1));
  const auto t = decode_ids(*m.engine, m.config, sources, std::vector<DecodeOptions>(sources.size(), cold));
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_EQ(k[i].hypotheses.at(0).ids, g[i].hypotheses.at(0).ids) << "sentence " << i;
    EXPECT_EQ(t[i].hypotheses.at(0).ids, g[i].hypotheses.at(0).ids) << "sentence " << i;
    EXPECT_EQ(g[i].hypotheses.at(0).ids, m.refs[i].greedy.ids) << "transformers' greedy";
  }
}

TEST(SamplingModel, SeededSentencesOfAMixedLoadEqualTheirLoneRuns) {
  Model& m = model();
  std::vector<std::vector<int>> sources;
  for (size_t i = 0; i < 20 && i < m.refs.size(); ++i) sources.push_back(m.refs[i].source_ids);
  const std::vector<DecodeOptions> options = mixed_options(sources.size());
  const std::vector<Translation> together = decode_ids(*m.engine, m.config, sources, options);
  size_t sampled_differ = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const Translation alone = decode_ids(*m.engine, m.config, {sources[i]}, {options[i]}).at(0);
    ASSERT_EQ(together[i].hypotheses.size(), alone.hypotheses.size()) << "sentence " << i;
    for (size_t h = 0; h < alone.hypotheses.size(); ++h) {
      EXPECT_EQ(together[i].hypotheses[h].ids, alone.hypotheses[h].ids) << "sentence " << i << " hypothesis " << h;
      // The CPU engine's float32 sums depend in the last bits on the rows of a step (GEMM
      // blocking), for every search alike; a draw could flip only where its uniform number
      // falls within that of a boundary of the cumulative distribution.
      EXPECT_NEAR(together[i].hypotheses[h].score, alone.hypotheses[h].score, 1e-5) << "sentence " << i;
    }
    if (options[i].samples() && together[i].hypotheses[0].ids != m.refs[i].greedy.ids) ++sampled_differ;
  }
  EXPECT_GT(sampled_differ, 0u) << "the sampling sentences all came out greedy";
}
