// Golden test2016 through nmt::Translator on the CUDA engine against transformers' generate()
// (float32 beam 4): token ids and BLEU, in float32 and float16.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "model/cuda_engine.h"
#include "model/translator.h"
#include "tests/support/bleu.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

struct Result {
  int same = 0;
  double bleu = 0;
  size_t n = 0;
};

Result run_golden(Precision precision, int batch_size, int beam) {
  const auto golden = test::load_golden();
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = precision;
  auto translator = Translator::load(test::demo_model_dir(), o);
  DecodeOptions d;
  d.beam_size = beam;
  std::vector<Translation> out;
  for (size_t b = 0; b < golden.size(); b += size_t(batch_size)) {
    std::vector<std::vector<int>> ids;
    for (size_t i = b; i < std::min(golden.size(), b + size_t(batch_size)); ++i) ids.push_back(golden[i].source_ids);
    for (auto& t : translator->translate_ids(ids, d)) out.push_back(std::move(t));
  }
  Result r;
  r.n = out.size();
  std::vector<std::string> hyps;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& want = beam == 1 ? golden[i].greedy.ids : golden[i].beam4.ids;
    r.same += out[i].hypotheses[0].ids == want;
    hyps.push_back(out[i].hypotheses[0].text);
  }
  r.bleu = test::corpus_bleu(hyps, test::test2016_references());
  std::cout << (precision == Precision::kFloat16 ? "fp16" : "fp32") << " beam " << beam
            << " batch " << batch_size
            << ": identical " << r.same << " / " << r.n << ", BLEU "
            << r.bleu << ", GPU memory " << (translator->device_memory_used() >> 20) << " MiB\n";
  return r;
}

#define SKIP_UNLESS_READY()                                                                    \
  if (cuda_device_count() == 0)                                                                \
    GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not " \
                    "tested here";                                                             \
  if (!test::have_golden()) GTEST_SKIP() << "golden references absent: " << test::golden_dir()

}  // namespace

TEST(GoldenCuda, Float32Beam4) {
  SKIP_UNLESS_READY();
  const Result r = run_golden(Precision::kFloat32, 64, 4);
  EXPECT_GE(r.same, int(r.n) * 98 / 100);
  EXPECT_NEAR(r.bleu, 37.61, 0.2);
}

// Batches of 256: a step's many sentences finish at different steps, so the steps that follow
// the one in flight (StepGroup::follows) carry sentences that finished there.
TEST(GoldenCuda, Float32Beam4Batch256) {
  SKIP_UNLESS_READY();
  const Result r = run_golden(Precision::kFloat32, 256, 4);
  EXPECT_GE(r.same, int(r.n) * 98 / 100);
  EXPECT_NEAR(r.bleu, 37.61, 0.2);
}

TEST(GoldenCuda, Float16Beam4) {
  SKIP_UNLESS_READY();
  const Result r = run_golden(Precision::kFloat16, 64, 4);
  EXPECT_GE(r.same, int(r.n) * 90 / 100);
  EXPECT_NEAR(r.bleu, 37.61, 0.5);
}

// Batches of 1, 4 and 8 (4 to 32 rows a step): the decoder's projections on the tensor-core
// small GEMM (kernels/small_gemm.h) rather than cuBLAS.
TEST(GoldenCuda, Float16Beam4SmallBatches) {
  SKIP_UNLESS_READY();
  for (int batch : {1, 4, 8}) {
    const Result r = run_golden(Precision::kFloat16, batch, 4);
    EXPECT_GE(r.same, int(r.n) * 98 / 100) << "batch " << batch;
    EXPECT_NEAR(r.bleu, 37.61, 0.5) << "batch " << batch;
  }
}

TEST(GoldenCuda, Float32GreedyAndBatchOne) {
  SKIP_UNLESS_READY();
  const Result greedy = run_golden(Precision::kFloat32, 128, 1);
  EXPECT_GE(greedy.same, int(greedy.n) * 98 / 100);
  const Result single = run_golden(Precision::kFloat32, 1, 4);
  EXPECT_GE(single.same, int(single.n) * 98 / 100);
}
