// The CUDA engine step by step against the float32 CPU engine on the embedded demo model:
// encoder outputs, then decoder steps driven with identical inputs (beam reorder, sentences
// leaving the batch, EOS masks), comparing the returned top-k log-probs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/error.h"
#include "model/weights.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

// Source ids of test2016 sentences 0-3 (from the golden file), each ending in </s>.
const std::vector<std::vector<int>> kSources = {
    {5, 17, 4, 24, 168, 89, 6348, 39, 263, 2, 0},
    {5, 5942, 6184, 16, 174, 14, 6321, 114, 214, 4, 86, 19, 3, 45, 583, 2, 0},
    {5, 17, 2, 0},
    {26, 60, 10, 3, 112, 35, 91, 19, 3, 219, 8, 3, 1118, 2, 0},
};

struct Models {
  ModelConfig config;
  Weights weights;
};
const Models& models() {
  static const Models m = [] {
    Models r{ModelConfig::load(test::demo_model_dir()), {}};
    r.weights = Weights::load(test::demo_model_dir(), r.config);
    return r;
  }();
  return m;
}

std::unique_ptr<Engine> cuda_engine(Precision p, size_t limit = 0) {
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = p;
  o.device_memory_limit = limit;
  return make_cuda_engine(models().config, models().weights, o);
}

#define SKIP_WITHOUT_GPU()                                                                   \
  if (cuda_device_count() == 0)                                                              \
  GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not " \
                  "tested here"

struct Diff {
  double max_score = 0;
  int ranks = 0, same_ids = 0;
};

// Runs `steps` decoder steps on both engines with the same inputs (taken from the reference's
// choices) and compares every step's output. Sentence 1 leaves after step 2.
Diff drive(Engine& ref, Engine& gpu, int beam, int steps, double tol) {
  const int vocab = ref.vocab_size();
  const int k = beam == 1 ? 1 : 2 * beam;
  ref.encode(kSources, beam);
  gpu.encode(kSources, beam);
  Diff diff;
  std::vector<int> tokens(kSources.size() * beam, models().config.decoder_start_id);
  std::vector<float> running;
  for (size_t s = 0; s < kSources.size(); ++s)
    for (int b = 0; b < beam; ++b) running.push_back(b == 0 ? 0.f : -1e9f);
  std::vector<int> parents;
  std::vector<int> alive(kSources.size());
  for (size_t i = 0; i < alive.size(); ++i) alive[i] = int(i);
  for (int t = 0; t < steps; ++t) {
    StepInput in;
    in.tokens = &tokens;
    in.parent_rows = t == 0 ? nullptr : &parents;
    in.running_scores = &running;
    in.step = t;
    in.beam = beam;
    in.k = k;
    in.mask_eos = t < 2;
    in.force_eos = t == steps - 1;
    StepOutput a, b;
    ref.step(in, &a);
    gpu.step(in, &b);
    EXPECT_EQ(a.scores.size(), b.scores.size());
    EXPECT_EQ(a.candidates.size(), b.candidates.size());
    if (a.scores.size() != b.scores.size() || a.candidates.size() != b.candidates.size()) return diff;
    for (size_t i = 0; i < a.scores.size(); ++i) {
      ++diff.ranks;
      diff.same_ids += a.candidates[i] == b.candidates[i];
      if (std::isinf(a.scores[i]) || std::isinf(b.scores[i])) {
        EXPECT_EQ(a.scores[i], b.scores[i]) << "step " << t << " entry " << i;
        continue;
      }
      const double d = std::fabs(double(a.scores[i]) - b.scores[i]);
      diff.max_score = std::max(diff.max_score, d);
      EXPECT_LE(d, tol) << "step " << t << " entry " << i << " ref " << a.scores[i] << " gpu "
                        << b.scores[i];
    }
    // Next inputs from the reference: the first `beam` candidates of each sentence go on;
    // sentence 1 (when still there) leaves after step 2.
    std::vector<int> next_tokens, next_parents, next_alive;
    std::vector<float> next_running;
    for (size_t g = 0; g < alive.size(); ++g) {
      if (t == 2 && alive[g] == 1) continue;
      for (int j = 0; j < beam; ++j) {
        const int c = a.candidates[g * k + j];
        next_tokens.push_back(c % vocab);
        next_parents.push_back(int(g) * beam + c / vocab);
        next_running.push_back(a.scores[g * k + j]);
      }
      next_alive.push_back(alive[g]);
    }
    tokens.swap(next_tokens);
    parents.swap(next_parents);
    running.swap(next_running);
    alive.swap(next_alive);
  }
  return diff;
}

double encoder_diff(Engine& ref, Engine& gpu) {
  ref.encode(kSources, 1);
  gpu.encode(kSources, 1);
  double worst = 0;
  for (size_t s = 0; s < kSources.size(); ++s) {
    const auto a = ref.encoder_output(s), b = gpu.encoder_output(s);
    EXPECT_EQ(a.size(), b.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  return worst;
}

}  // namespace

TEST(CudaEngine, Float32StepsMatchCpuEngine) {
  SKIP_WITHOUT_GPU();
  auto ref = make_cpu_engine(models().config, models().weights);
  auto gpu = cuda_engine(Precision::kFloat32);
  const double enc = encoder_diff(*ref, *gpu);
  std::cout << "fp32 encoder output max |diff|: " << enc << "\n";
  EXPECT_LE(enc, 1e-4);
  for (int beam : {1, 4, 16}) {  // 16: the serving limit, k = 32
    const Diff d = drive(*ref, *gpu, beam, 8, 1e-4);
    std::cout << "fp32 beam " << beam << ": max |log-prob diff| " << d.max_score << ", same ids "
              << d.same_ids << " / " << d.ranks << "\n";
    EXPECT_GE(d.same_ids, d.ranks * 98 / 100);
  }
  std::cout << "fp32 engine holds " << (gpu->memory_used() >> 20) << " MiB\n";
}

TEST(CudaEngine, Float16StepsMatchCpuEngine) {
  SKIP_WITHOUT_GPU();
  auto ref = make_cpu_engine(models().config, models().weights);
  auto gpu = cuda_engine(Precision::kFloat16);
  const double enc = encoder_diff(*ref, *gpu);
  std::cout << "fp16 encoder output max |diff|: " << enc << "\n";
  EXPECT_LE(enc, 0.1);
  for (int beam : {1, 4}) {
    const Diff d = drive(*ref, *gpu, beam, 8, 5e-2);
    std::cout << "fp16 beam " << beam << ": max |log-prob diff| " << d.max_score << ", same ids "
              << d.same_ids << " / " << d.ranks << "\n";
    EXPECT_GE(d.same_ids, d.ranks * 80 / 100);
  }
  std::cout << "fp16 engine holds " << (gpu->memory_used() >> 20) << " MiB\n";
}

// EOS forced at max length scores log-prob 0 (transformers' ForcedEOSTokenLogitsProcessor), on
// both engines: every sentence's candidates are its beams' EOS at exactly their running score.
TEST(CudaEngine, ForcedEosScoresLogProbZero) {
  SKIP_WITHOUT_GPU();
  auto ref = make_cpu_engine(models().config, models().weights);
  for (Precision p : {Precision::kFloat32, Precision::kFloat16}) {
    auto gpu = cuda_engine(p);
    const int beam = 4, k = 8, vocab = ref->vocab_size(), eos = models().config.eos_id;
    ref->encode(kSources, beam);
    gpu->encode(kSources, beam);
    std::vector<int> tokens(kSources.size() * beam, models().config.decoder_start_id);
    std::vector<float> running;
    for (size_t s = 0; s < kSources.size(); ++s)
      for (int b = 0; b < beam; ++b) running.push_back(-1.5f * float(b + s));
    StepInput in;
    in.tokens = &tokens;
    in.running_scores = &running;
    in.step = 0;
    in.beam = beam;
    in.k = k;
    in.force_eos = true;
    StepOutput a, b;
    ref->step(in, &a);
    gpu->step(in, &b);
    ASSERT_EQ(a.candidates, b.candidates);
    ASSERT_EQ(a.scores.size(), kSources.size() * k);
    for (size_t s = 0; s < kSources.size(); ++s) {
      for (int j = 0; j < k; ++j) {
        const size_t i = s * k + size_t(j);
        if (j < beam) {
          EXPECT_EQ(b.candidates[i], j * vocab + eos) << "sentence " << s << " rank " << j;
          EXPECT_EQ(b.scores[i], running[s * beam + size_t(j)]) << "sentence " << s << " rank " << j;
        } else {
          EXPECT_TRUE(std::isinf(b.scores[i]) && b.scores[i] < 0);
        }
        EXPECT_EQ(a.scores[i], b.scores[i]) << "sentence " << s << " rank " << j;
      }
    }
  }
}

// The captured decode graphs replay exactly what the plain stream launches compute.
TEST(CudaEngine, GraphsEqualPlainLaunches) {
  SKIP_WITHOUT_GPU();
  setenv("NMT_CUDA_GRAPHS", "0", 1);
  auto plain = cuda_engine(Precision::kFloat16);
  unsetenv("NMT_CUDA_GRAPHS");
  auto graphed = cuda_engine(Precision::kFloat16);
  const Diff d = drive(*plain, *graphed, 4, 8, 0.0);
  EXPECT_EQ(d.same_ids, d.ranks);
}

TEST(CudaEngine, MemoryLimitGivesResourceExhausted) {
  SKIP_WITHOUT_GPU();
  try {
    cuda_engine(Precision::kFloat32, size_t(1) << 20);
    ADD_FAILURE() << "a 1 MiB limit should not hold the weights";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    std::cout << "weights over the limit: " << e.what() << "\n";
  }
  // Weights fit, a large batch's decode buffers do not; the engine stays usable afterwards
  // (the server answers RESOURCE_EXHAUSTED and goes on with smaller batches).
  const size_t weights = cuda_engine(Precision::kFloat16)->memory_used();
  const size_t limit = weights + (size_t(4) << 20);
  auto gpu = cuda_engine(Precision::kFloat16, limit);
  std::vector<std::vector<int>> many(256, kSources[1]);
  try {
    gpu->encode(many, 8);
    ADD_FAILURE() << "encoding 256 sentences x beam 8 should exceed the limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    std::cout << "batch over the limit: " << e.what() << "\n";
  }
  EXPECT_LE(gpu->memory_used(), limit);
  auto ref = make_cpu_engine(models().config, models().weights);
  const Diff d = drive(*ref, *gpu, 1, 4, 5e-2);
  EXPECT_EQ(d.same_ids, d.ranks);
  EXPECT_LE(gpu->memory_used(), limit);
}

TEST(CudaEngine, DeviceCountAndBadIndex) {
  SKIP_WITHOUT_GPU();
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.device_index = cuda_device_count();
  EXPECT_THROW(make_cuda_engine(models().config, models().weights, o), Error);
}
