// return_alignments on the CUDA engine in float32: transformers' cross-attention argmax per
// token (tests/support/conformance/alignment_references.h), and sentences that ask sharing following
// steps with sentences that do not, each as it is alone. Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <map>

#include "model/cuda_engine.h"
#include "model/decoding/decode_loop.h"
#include "model/translator.h"
#include "tests/support/conformance/alignment_references.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {
constexpr const char* kNoGpu = "no CUDA device visible (CPU-only build or no GPU): return_alignments on CUDA not tested";
bool gpu() { return cuda_device_count() > 0; }
}  // namespace

TEST(AlignmentsCuda, ArgmaxEqualsTransformersCrossAttentionFloat32) {
  if (!gpu()) GTEST_SKIP() << kNoGpu;
  const test::AlignmentTally t = test::compare_alignments(Device::kCuda);
  EXPECT_GT(t.tokens, 500);
  EXPECT_EQ(t.ids_differ, 0) << t.first_difference;
  EXPECT_EQ(t.differ, 0) << t.first_difference;
  EXPECT_EQ(t.identical + t.ties, t.tokens);
}

// Steps that follow the one before (two in flight) carry sentences that ask and sentences
// that do not: each comes out as alone, the asking ones with the CPU engine's alignments.
TEST(AlignmentsCuda, MixedFollowingStepsEqualLoneTranslations) {
  if (!gpu()) GTEST_SKIP() << kNoGpu;
  TranslatorOptions o;
  o.precision = Precision::kFloat32;
  o.device = Device::kCuda;
  auto gpu_tr = Translator::load(test::demo_model_dir(), o);
  o.device = Device::kCpu;
  auto cpu_tr = Translator::load(test::demo_model_dir(), o);
  const std::vector<std::string> texts = {"A man is riding a bike.", "Two dogs play in the snow.",
                                          "A woman sings on a stage.", "Children are eating."};
  DecodeOptions plain, asking;
  asking.return_alignments = true;
  for (int beam : {1, 4}) {
    plain.beam_size = asking.beam_size = beam;
    auto loop = gpu_tr->make_loop({4, 16, 32});
    loop->set_follow_rows(1);
    std::vector<LoopSentence> in;
    for (size_t i = 0; i < texts.size(); ++i)
      in.push_back({i, gpu_tr->encode_source(texts[i]), i % 2 == 0 ? asking : plain});
    loop->admit(in);
    std::map<uint64_t, Translation> got;
    while (!loop->idle()) {
      for (FinishedSentence& f : loop->step().finished) got[f.id] = f.translation;
    }
    ASSERT_EQ(got.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const DecodeOptions& opt = i % 2 == 0 ? asking : plain;
      const Hypothesis alone = cpu_tr->translate_ids({in[i].source_ids}, opt).at(0).hypotheses.at(0);
      const Hypothesis& h = got[i].hypotheses.at(0);
      EXPECT_EQ(h.ids, alone.ids) << texts[i] << " beam " << beam;
      ASSERT_EQ(h.alignments.size(), alone.alignments.size()) << texts[i];
      for (size_t t = 0; t < h.alignments.size(); ++t)
        EXPECT_EQ(h.alignments[t].source_token, alone.alignments[t].source_token) << texts[i] << " token " << t;
    }
  }
}
