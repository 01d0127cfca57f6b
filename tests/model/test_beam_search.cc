// The host decoding loop against a scripted engine: stopping rules, length limits,
// cancellation, and finished sentences leaving the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "model/beam_search.h"

using namespace nmt;

namespace {

constexpr int kVocab = 6, kEos = 0, kPad = 5;

// Sentence s prefers EOS from step eos_step[s] on; before that token 1 + (step % 4) is
// likeliest. Records the rows of every step.
class ScriptedEngine : public Engine {
 public:
  explicit ScriptedEngine(std::vector<int> eos_step) : eos_step_(std::move(eos_step)) {}
  void encode(const std::vector<std::vector<int>>& src, int) override {
    alive_.resize(src.size());
    std::iota(alive_.begin(), alive_.end(), 0);
  }
  int vocab_size() const override { return kVocab; }
  std::vector<float> encoder_output(size_t) const override { return {}; }
  void step(const StepInput& in, StepOutput* out) override {
    const size_t rows = in.tokens->size();
    if (in.parent_rows) {
      std::vector<size_t> alive;
      for (size_t g = 0; g * size_t(in.beam) < rows; ++g) {
        alive.push_back(alive_[size_t((*in.parent_rows)[g * size_t(in.beam)] / in.beam)]);
      }
      alive_ = alive;
    }
    rows_per_step.push_back(rows);
    out->scores.clear();
    out->candidates.clear();
    for (size_t g = 0; g < rows / size_t(in.beam); ++g) {
      std::vector<float> s(size_t(in.beam) * kVocab);
      for (int b = 0; b < in.beam; ++b) {
        std::vector<float> lp(kVocab, std::log(0.02f));
        lp[size_t(1 + (in.step % 4))] = std::log(0.6f);
        lp[size_t(1 + ((in.step + 1) % 4))] = std::log(0.2f);
        lp[kEos] = in.step >= eos_step_[alive_[g]] ? std::log(0.9f) : std::log(0.1f);
        lp[kPad] = -std::numeric_limits<float>::infinity();
        if (in.mask_eos) lp[kEos] = -std::numeric_limits<float>::infinity();
        if (in.force_eos) {  // as transformers: only EOS, with log-prob 0
          for (int t = 1; t < kVocab; ++t) lp[size_t(t)] = -std::numeric_limits<float>::infinity();
          lp[kEos] = 0.f;
        }
        for (int t = 0; t < kVocab; ++t) {
          s[size_t(b * kVocab + t)] = lp[size_t(t)] + (*in.running_scores)[g * size_t(in.beam) + size_t(b)];
        }
      }
      std::vector<int> order(s.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[size_t(a)] > s[size_t(b)]; });
      for (int j = 0; j < in.k; ++j) {
        out->scores.push_back(s[size_t(order[size_t(j)])]);
        out->candidates.push_back(order[size_t(j)]);
      }
    }
  }
  std::vector<size_t> rows_per_step;

 private:
  std::vector<int> eos_step_;
  std::vector<size_t> alive_;
};

ModelConfig scripted_config() {
  ModelConfig c;
  c.vocab_size = kVocab;
  c.eos_id = kEos;
  c.pad_id = kPad;
  c.decoder_start_id = kPad;
  return c;
}

std::vector<DecodeResult> run(ScriptedEngine& e, size_t n, const DecodeOptions& o, const CancelFn& cancel = {}) {
  e.encode(std::vector<std::vector<int>>(n, {1, kEos}), o.beam_size);
  return decode(e, n, scripted_config(), o, cancel, nullptr);
}

}  // namespace

TEST(BeamSearch, FinishedSentencesLeaveTheBatch) {
  ScriptedEngine e({2, 9});
  DecodeOptions o;
  const auto r = run(e, 2, o);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].ids[0].back(), kEos);
  EXPECT_EQ(r[1].ids[0].back(), kEos);
  EXPECT_LT(r[0].ids[0].size(), r[1].ids[0].size());
  // Both sentences at first (2 x beam 4 rows), only the long one at the end.
  EXPECT_EQ(e.rows_per_step.front(), 8u);
  EXPECT_EQ(e.rows_per_step.back(), 4u);
}

TEST(BeamSearch, GreedyFollowsTheArgmaxAndStopsAtEos) {
  ScriptedEngine e({3});
  DecodeOptions o;
  o.beam_size = 1;
  const auto r = run(e, 1, o);
  EXPECT_EQ(r[0].ids[0], (std::vector<int>{1, 2, 3, kEos}));
  // Score: (log .6 * 3 + log .9) / 4 tokens.
  EXPECT_NEAR(r[0].scores[0], (3 * std::log(0.6f) + std::log(0.9f)) / 4, 1e-5);
}

TEST(BeamSearch, MinAndMaxDecodingLength) {
  for (int beam : {1, 4}) {
    ScriptedEngine e({1});
    DecodeOptions o;
    o.beam_size = beam;
    o.min_decoding_length = 6;
    auto r = run(e, 1, o);
    EXPECT_EQ(r[0].ids[0].size(), 7u) << "beam " << beam << ": 6 tokens, then EOS";
    ScriptedEngine never_eos({1000});
    o.min_decoding_length = 0;
    o.max_decoding_length = 5;
    r = run(never_eos, 1, o);
    EXPECT_EQ(r[0].ids[0].size(), 5u) << "beam " << beam << ": EOS forced at the limit";
    EXPECT_EQ(r[0].ids[0].back(), kEos);
    // The forced EOS adds log-prob 0: four tokens of log .6, normalized by 5 tokens.
    EXPECT_NEAR(r[0].scores[0], 4 * std::log(0.6f) / 5, 1e-5) << "beam " << beam;
  }
}

TEST(BeamSearch, NBestIsSortedAndDistinct) {
  ScriptedEngine e({4});
  DecodeOptions o;
  o.num_hypotheses = 4;
  const auto r = run(e, 1, o);
  ASSERT_EQ(r[0].ids.size(), 4u);
  for (size_t h = 1; h < 4; ++h) {
    EXPECT_GE(r[0].scores[h - 1], r[0].scores[h]);
    EXPECT_NE(r[0].ids[h - 1], r[0].ids[h]);
  }
}

TEST(BeamSearch, CancelledSentenceLeavesAndReturnsNothing) {
  ScriptedEngine e({50, 50});
  DecodeOptions o;
  o.max_decoding_length = 20;
  int polls = 0;
  const auto r = run(e, 2, o, [&](size_t i) { return i == 1 && ++polls >= 3; });
  EXPECT_TRUE(r[1].cancelled);
  EXPECT_TRUE(r[1].ids.empty());
  EXPECT_FALSE(r[0].cancelled);
  EXPECT_EQ(r[0].ids[0].size(), 20u);
  EXPECT_EQ(e.rows_per_step[2], 8u);
  EXPECT_EQ(e.rows_per_step[3], 4u);
}
