// Glossary on the CUDA engine (float32, docs/decoding.md "Glossary"): the constrained search
// takes the same host path as on the CPU, from the rows' logits the CUDA engine returns
// (StepGroup::return_logits on beam groups). On the demo model every required term is in every
// hypothesis; the best hypotheses match the CPU engine's (float32 logits may differ in their
// last bits, so a near tie may go the other way: at most one sentence may differ); constrained
// sentences beside plain ones that follow the step in flight each equal their lone run. Skips,
// saying why, without a visible CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/cuda_engine.h"
#include "model/decoding/decode_loop.h"
#include "model/translator.h"
#include "tests/support/glossary_cases.h"
#include "tests/support/golden.h"
#include "tests/support/loop_runs.h"

using namespace nmt;

namespace {

constexpr const char* kNoCudaGlossary = "no CUDA device visible (CPU-only build or no GPU): the glossary on the CUDA engine is not tested here";

std::unique_ptr<Translator> load(Device device) {
  TranslatorOptions o;
  o.device = device;
  o.precision = Precision::kFloat32;
  return Translator::load(test::demo_model_dir(), o);
}

class GlossaryCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << kNoCudaGlossary;
  }
};

}  // namespace

TEST_F(GlossaryCuda, EveryTermInEveryHypothesisAsOnTheCpu) {
  auto gpu = load(Device::kCuda);
  auto cpu = load(Device::kCpu);
  int same = 0;
  for (const test::GlossaryCase& c : test::kGlossaryCases) {
    DecodeOptions o;
    o.num_hypotheses = 4;
    for (const std::string& t : c.targets) o.glossary_phrases.push_back(gpu->encode_target(t));
    const Translation g = gpu->translate({c.source}, o).at(0);
    const Translation h = cpu->translate({c.source}, o).at(0);
    ASSERT_EQ(g.hypotheses.size(), 4u) << c.source;
    for (const Hypothesis& hyp : g.hypotheses) {
      for (const auto& p : o.glossary_phrases) EXPECT_TRUE(test::holds_phrase(hyp.ids, p)) << c.source << ": " << hyp.text;
    }
    same += g.hypotheses[0].ids == h.hypotheses[0].ids;
    std::cout << c.source << " -> " << g.hypotheses[0].text << "\n";
  }
  EXPECT_GE(same, int(test::kGlossaryCases.size()) - 1) << "best hypotheses equal to the CPU engine's";
}

TEST_F(GlossaryCuda, MixedLoadEqualsLoneTranslations) {
  auto gpu = load(Device::kCuda);
  std::vector<LoopSentence> mixed;
  uint64_t id = 0;
  for (const test::GlossaryCase& c : test::kGlossaryCases) {
    DecodeOptions plain;
    plain.num_hypotheses = 2;
    DecodeOptions constrained = plain;
    for (const std::string& t : c.targets) constrained.glossary_phrases.push_back(gpu->encode_target(t));
    const std::vector<int> src = gpu->encode_source(c.source);
    mixed.push_back({id++, src, plain});
    mixed.push_back({id++, src, constrained});
  }
  const auto together = test::run_loop(*gpu, mixed, true);
  ASSERT_EQ(together.size(), mixed.size());
  for (const LoopSentence& s : mixed) {
    const Translation a = test::run_loop(*gpu, {s}, false).at(s.id);
    const Translation& b = together.at(s.id);
    ASSERT_EQ(b.hypotheses.size(), a.hypotheses.size()) << "sentence " << s.id;
    EXPECT_EQ(b.hypotheses[0].ids, a.hypotheses[0].ids) << "sentence " << s.id;
    for (const auto& p : s.options.glossary_phrases) EXPECT_TRUE(test::holds_phrase(b.hypotheses[0].ids, p));
  }
}
