// The CUDA engine on every family of tests/conformance/families against the CPU engine, step by
// step (float32); the Marian demo model's steps are test_cuda_engine.cc's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/error.h"
#include "tests/engine/demo_engine.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

// Both engines' step outputs: the largest score difference and the candidates that differ
// (among those the search could take: -inf candidates of a forced token's step are no choice).
std::pair<double, int> step_diff(const StepOutput& a, const StepOutput& b) {
  EXPECT_EQ(a.scores.size(), b.scores.size());
  double worst = 0;
  int differ = 0;
  for (size_t i = 0; i < std::min(a.scores.size(), b.scores.size()); ++i) {
    if (std::isinf(a.scores[i]) && a.scores[i] == b.scores[i]) continue;
    worst = std::max(worst, std::fabs(double(a.scores[i]) - b.scores[i]));
    differ += a.candidates[i] != b.candidates[i];
  }
  return {worst, differ};
}

}  // namespace

// Every family of tests/conformance/families (pre-norm layers, final and embedding LayerNorms,
// M2M-100's <pad> positions, no output bias) on the float32 CUDA engine against the CPU
// engine: the encoder's outputs (a source with a <pad> inside too), then two decode steps of
// beam 4 where the first forces a target-language token on two of the three sentences and
// the second feeds a <pad> (a zero position for M2M-100) beside ordinary tokens.
TEST(CudaEngine, FamiliesMatchCpuEngine) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::string> families = test::conformance_families();
  if (families.empty()) GTEST_SKIP() << "tests/conformance/families holds no variants";
  for (const std::string& variant : families) {
    SCOPED_TRACE(variant);
    const std::string dir = test::conformance_dir() + "/families/" + variant;
    const ModelConfig config = ModelConfig::load(dir);
    const Weights weights = Weights::load(dir, config);
    const std::vector<test::GoldenSentence> refs = test::load_references(dir + "/references.jsonl");
    ASSERT_GE(refs.size(), 2u);
    auto ref = make_cpu_engine(config, weights);
    TranslatorOptions o;
    o.device = Device::kCuda;
    o.precision = Precision::kFloat32;
    auto gpu = make_cuda_engine(config, weights, o);
    std::vector<std::vector<int>> sources = {refs[0].source_ids, refs[1].source_ids, refs[0].source_ids};
    sources[2].insert(sources[2].begin() + 1, config.pad_id);  // M2M-100: no position of its own
    std::vector<EncodeItem> items;
    int longest = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      items.push_back({&sources[i], int(sources.size() - 1 - i)});
      longest = std::max(longest, int(sources[i].size()));
    }
    const int beam = 4, n = int(sources.size());
    const EngineCapacity cap{n, n * beam, longest};
    ref->reserve(cap);
    gpu->reserve(cap);
    ref->encode(items);
    gpu->encode(items);
    double enc = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto a = ref->encoder_output(i), b = gpu->encoder_output(i);
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) enc = std::max(enc, std::fabs(double(a[j]) - b[j]));
    }
    std::cout << variant << " fp32 encoder output max |diff|: " << enc << "\n";
    EXPECT_LE(enc, 1e-4);

    const int vocab = ref->vocab_size();
    StepInput in;
    for (int i = 0; i < n; ++i) {
      StepGroup g;
      g.slot = items[size_t(i)].slot;
      g.beam = beam;
      g.k = topk_for_beam(beam);
      g.forced_token = i == 1 ? -1 : (7 * i + 5) % vocab;
      in.groups.push_back(g);
      for (int b = 0; b < beam; ++b) {
        in.tokens.push_back(config.decoder_start_id);
        in.cache_rows.push_back(i * beam + b);
        in.parent_rows.push_back(i * beam + b);
        in.running_scores.push_back(b == 0 ? 0.f : -1e9f);
      }
    }
    StepOutput a, b;
    ref->step(in, &a);
    gpu->step(in, &b);
    auto [worst, differ] = step_diff(a, b);
    std::cout << variant << " fp32 forced step: max |score diff| " << worst << ", " << differ
              << " candidates differ\n";
    EXPECT_LE(worst, 1e-4);
    EXPECT_EQ(differ, 0);
    const int k = topk_for_beam(beam);
    for (int i : {0, 2}) {
      EXPECT_EQ(b.candidates[size_t(i * k)] % vocab, in.groups[size_t(i)].forced_token) << "sentence " << i;
      EXPECT_EQ(b.scores[size_t(i * k)], 0.f) << "sentence " << i;
    }
    // Position 1: a <pad>, the forced token, and two ordinary tokens in each sentence's beam.
    for (StepGroup& g : in.groups) {
      g.position = 1;
      g.forced_token = -1;
    }
    for (int r = 0; r < n * beam; ++r) {
      const int choice = r % beam;
      in.tokens[size_t(r)] = choice == 0 ? config.pad_id : choice == 1 ? (7 * (r / beam) + 5) % vocab
                                                                       : (31 * r + 11) % vocab;
      in.running_scores[size_t(r)] = -0.5f * float(choice);
    }
    ref->step(in, &a);
    gpu->step(in, &b);
    std::tie(worst, differ) = step_diff(a, b);
    std::cout << variant << " fp32 step with <pad>: max |score diff| " << worst << ", " << differ
              << " candidates differ\n";
    EXPECT_LE(worst, 1e-4);
    EXPECT_EQ(differ, 0);
  }
}
