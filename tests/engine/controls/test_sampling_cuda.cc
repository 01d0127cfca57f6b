// Sampling on the CUDA engine (float32) against the CPU engine, on the conformance model
// swish_tied (706 tokens: the logits' rows are padded on the device, final_logits_bias is added
// at collect): the first-step logits a sampling group downloads equal the CPU's; the first
// token's frequencies over fixed seeds match the CPU's softmax (chi-square); seeded sentences
// of a mixed load (sampling beside greedy and beam sentences that follow the step in flight)
// give the CPU's ids and each equals its lone run on the GPU. Skips, saying why, without a
// visible CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"
#include "tests/support/sampling_checks.h"
#include "tests/support/sampling_reference.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr const char* kNoCudaSampling = "no CUDA device visible (CPU-only build or no GPU): sampling on the CUDA engine is not tested here";

struct SamplingModels {
  std::string dir = conformance_dir() + "/models/swish_tied";
  ModelConfig config = ModelConfig::load(dir);
  Weights weights = Weights::load(dir, config);
  std::unique_ptr<Engine> cpu = make_cpu_engine(config, weights);
  std::unique_ptr<Engine> cuda = [&] {
    TranslatorOptions o;
    o.device = Device::kCuda;
    o.precision = Precision::kFloat32;
    return make_cuda_engine(config, weights, o);
  }();
  std::vector<GoldenSentence> refs = load_references(dir + "/references.jsonl");
};

SamplingModels& models() {
  static SamplingModels m;
  return m;
}

class SamplingCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << kNoCudaSampling;
  }
};

}  // namespace

TEST_F(SamplingCuda, DownloadedLogitsEqualTheCpuEngines) {
  SamplingModels& m = models();
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<float> cpu = first_step_logits(*m.cpu, m.config, m.refs.at(i).source_ids);
    const std::vector<float> gpu = first_step_logits(*m.cuda, m.config, m.refs.at(i).source_ids);
    ASSERT_EQ(gpu.size(), cpu.size());
    double worst = 0;
    for (size_t t = 0; t < cpu.size(); ++t) worst = std::max(worst, double(std::fabs(gpu[t] - cpu[t])));
    std::cout << "sentence " << i << ": first-step logits, largest |cuda - cpu| " << worst << "\n";
    EXPECT_LT(worst, 1e-3) << "sentence " << i;
  }
}

TEST_F(SamplingCuda, FirstTokenFrequenciesMatchTheCpuSoftmax) {
  SamplingModels& m = models();
  const std::vector<int>& source = m.refs.at(0).source_ids;
  const std::vector<float> cpu_logits = first_step_logits(*m.cpu, m.config, source);
  const int n = 20000;
  for (const SamplingParams& p : {SamplingParams{0, 1.f, 1.f}, SamplingParams{30, 0.9f, 1.3f}}) {
    const std::vector<double> expected = warped_softmax(cpu_logits, first_step_masks(m.config), p);
    const std::vector<int> gpu = first_token_counts(*m.cuda, m.config, source, p, n);
    const ChiSquare c = chi_square(gpu, expected, n);
    std::cout << "topk " << p.topk << " topp " << p.topp << " temperature " << p.temperature << ": chi-square "
              << c.statistic << " over " << c.bins << " bins (critical " << chi_square_critical(c.bins - 1) << ")\n";
    EXPECT_GT(c.bins, 10);
    EXPECT_LT(c.statistic, chi_square_critical(c.bins - 1));
    EXPECT_EQ(c.outside, 0);
    // The same seeds on the CPU: the same draws, but where a uniform number falls within the
    // engines' float32 difference of a boundary of the cumulative distribution.
    const std::vector<int> cpu = first_token_counts(*m.cpu, m.config, source, p, n);
    int moved = 0;
    for (size_t t = 0; t < cpu.size(); ++t) moved += std::abs(cpu[t] - gpu[t]);
    std::cout << "  first tokens counted differently from the CPU's: " << moved << " of " << 2 * n << "\n";
    EXPECT_LE(moved, 2 * n / 1000);
  }
}

TEST_F(SamplingCuda, SeededMixedLoadGivesTheCpuIdsAndEachLoneRun) {
  SamplingModels& m = models();
  std::vector<std::vector<int>> sources;
  for (size_t i = 0; i < 40 && i < m.refs.size(); ++i) sources.push_back(m.refs[i].source_ids);
  const std::vector<DecodeOptions> options = mixed_options(sources.size());
  const std::vector<Translation> gpu = decode_ids(*m.cuda, m.config, sources, options);
  const std::vector<Translation> cpu = decode_ids(*m.cpu, m.config, sources, options);
  size_t hypotheses = 0, identical = 0, lone_differ = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    ASSERT_EQ(gpu[i].hypotheses.size(), cpu[i].hypotheses.size()) << "sentence " << i;
    const Translation alone = decode_ids(*m.cuda, m.config, {sources[i]}, {options[i]}).at(0);
    for (size_t h = 0; h < cpu[i].hypotheses.size(); ++h) {
      ++hypotheses;
      identical += gpu[i].hypotheses[h].ids == cpu[i].hypotheses[h].ids;
      lone_differ += alone.hypotheses.at(h).ids != gpu[i].hypotheses[h].ids;
    }
  }
  std::cout << "mixed load, float32: " << identical << " / " << hypotheses
            << " hypotheses with the CPU's ids; " << lone_differ << " differ from their lone GPU run\n";
  EXPECT_GE(identical, hypotheses * 98 / 100);
  EXPECT_LE(lone_differ, hypotheses / 100);
}
