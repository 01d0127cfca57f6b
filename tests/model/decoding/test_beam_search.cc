// The host search (SentenceSearch) against a scripted engine: stopping rules, length limits,
// n-best, and the beams a device chooses (continuing_beams) against the host's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "model/decoding/beam_search.h"
#include "tests/model/decoding/scripted_loop.h"

using namespace nmt;
using namespace nmt::test;

TEST(BeamSearch, FinishedSentencesLeaveTheLoop) {
  ScriptedEngine e;
  const auto r = run(e, {2, 9}, beam(4));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.at(0).translation.hypotheses[0].ids.back(), kEos);
  EXPECT_EQ(r.at(1).translation.hypotheses[0].ids.back(), kEos);
  EXPECT_LT(r.at(0).steps, r.at(1).steps);
  // Both sentences at first (2 x beam 4 rows), only the long one at the end.
  EXPECT_EQ(e.steps().front(), 8u);
  EXPECT_EQ(e.steps().back(), 4u);
}

TEST(BeamSearch, GreedyFollowsTheArgmaxAndStopsAtEos) {
  ScriptedEngine e;
  const auto r = run(e, {3}, beam(1));
  const Hypothesis& h = r.at(0).translation.hypotheses.at(0);
  // Token 1 + ((step + previous token) % 4): start token 5 -> 2, then 4, then 3, then EOS.
  EXPECT_EQ(h.ids, (std::vector<int>{2, 4, 3, kEos}));
  // Score: (log .6 * 3 + log .9) / 4 tokens.
  EXPECT_NEAR(h.score, (3 * std::log(0.6f) + std::log(0.9f)) / 4, 1e-5);
}

TEST(BeamSearch, MinAndMaxDecodingLength) {
  for (int k : {1, 4}) {
    ScriptedEngine e;
    DecodeOptions o = beam(k);
    o.min_decoding_length = 6;
    auto r = run(e, {1}, o);
    EXPECT_EQ(r.at(0).translation.hypotheses[0].ids.size(), 7u) << "beam " << k << ": 6 tokens, then EOS";
    ScriptedEngine never_eos;
    o.min_decoding_length = 0;
    o.max_decoding_length = 5;
    r = run(never_eos, {1000}, o);
    const Hypothesis& h = r.at(0).translation.hypotheses[0];
    EXPECT_EQ(h.ids.size(), 5u) << "beam " << k << ": EOS forced at the limit";
    EXPECT_EQ(h.ids.back(), kEos);
    // The forced EOS adds log-prob 0: four tokens of log .6, normalized by 5 tokens.
    EXPECT_NEAR(h.score, 4 * std::log(0.6f) / 5, 1e-5) << "beam " << k;
  }
}

TEST(BeamSearch, NBestIsSortedAndDistinct) {
  ScriptedEngine e;
  DecodeOptions o = beam(4);
  o.num_hypotheses = 4;
  const auto r = run(e, {4}, o);
  const auto& hyps = r.at(0).translation.hypotheses;
  ASSERT_EQ(hyps.size(), 4u);
  for (size_t h = 1; h < 4; ++h) {
    EXPECT_GE(hyps[h - 1].score, hyps[h].score);
    EXPECT_NE(hyps[h - 1].ids, hyps[h].ids);
  }
}

// The beams a device's top-k continues with (continuing_beams) are the host search's: after
// every step of random candidates, SentenceSearch's next rows are the candidates it keeps.
TEST(BeamSearch, ContinuingBeamsAreTheSearchsNextRows) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int b = 1 + int(rng() % 5), k = topk_for_beam(b), vocab = ScriptedEngine::kVocab;
    DecodeOptions o = beam(b);
    o.max_decoding_length = 3 + int(rng() % 6);
    SentenceSearch search(o, kConfig);
    for (int step = 0; step < 12; ++step) {
      // k distinct candidates, best first; scores with ties, EOS among them at times
      std::vector<int> cand(size_t(b * vocab));
      std::iota(cand.begin(), cand.end(), 0);
      std::shuffle(cand.begin(), cand.end(), rng);
      cand.resize(size_t(k));
      std::vector<float> scores(static_cast<size_t>(k));
      for (float& v : scores) v = -float(rng() % 6) * 0.5f - float(step);
      std::sort(scores.begin(), scores.end(), std::greater<float>());
      std::vector<char> hits(static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) hits[size_t(j)] = cand[size_t(j)] % vocab == kEos || search.force_eos();
      std::vector<float> running(static_cast<size_t>(k));
      std::vector<int> keep(static_cast<size_t>(b));
      continuing_beams(scores.data(), hits.data(), k, b, running.data(), keep.data());
      if (search.advance(scores.data(), cand.data(), vocab)) break;
      for (int r = 0; r < b; ++r) {
        const int j = keep[size_t(r)];
        EXPECT_EQ(search.tokens()[size_t(r)], cand[size_t(j)] % vocab) << trial << "/" << step;
        EXPECT_EQ(search.parents()[size_t(r)], cand[size_t(j)] / vocab) << trial << "/" << step;
        EXPECT_EQ(search.running_scores()[size_t(r)], running[size_t(j)]) << trial << "/" << step;
      }
    }
  }
}
