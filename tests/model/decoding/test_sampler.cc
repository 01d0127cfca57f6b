// Sampling (model/decoding/controls/sampler.h, SentenceSearch's sampling rows): the draws' frequencies
// against the warped softmax (chi-square over fixed seeds: deterministic, and failing where
// the distribution is wrong), top-k and top-p never leaving their sets, the masks, greedy at
// top-k 1 / temperature 0, and through the decode loop: a seed reproduces, a seeded sentence
// equals its lone run whatever else steps with it (on an engine that overlaps steps too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "model/decoding/decode_options.h"
#include "model/decoding/controls/sampler.h"
#include "model/error.h"
#include "tests/model/decoding/scripted_loop.h"
#include "tests/support/sampling_reference.h"

using namespace nmt;
using namespace nmt::test;

namespace {

SamplingParams params(int topk, float topp, float temperature) { return {topk, topp, temperature}; }

// Draws `n` tokens of one row, seed i for draw i (hypothesis 0, step 0), and their counts.
std::vector<int> counts(const std::vector<float>& logits, const SampleMasks& masks, const SamplingParams& p, int n) {
  Sampler sampler;
  std::vector<int> c(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++c[size_t(sampler.draw(logits.data(), int(logits.size()), masks, p, sample_uniform(uint64_t(i), 0, 0)).token)];
  return c;
}

std::vector<float> random_logits(int vocab, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = d(g);
  return x;
}

}  // namespace

TEST(Sampler, UniformNumbersAreKeyedAndSpread) {
  EXPECT_EQ(sample_uniform(7, 1, 3), sample_uniform(7, 1, 3));
  std::set<double> seen;
  for (uint64_t s = 0; s < 4; ++s) {
    for (int h = 0; h < 4; ++h) {
      for (int t = 0; t < 4; ++t) seen.insert(sample_uniform(s, h, t));
    }
  }
  EXPECT_EQ(seen.size(), 64u);  // no two keys alike
  // Spread over [0, 1): the mean and the deciles of 100000 consecutive seeds.
  std::vector<int> decile(10, 0);
  double mean = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = sample_uniform(uint64_t(i), 0, 0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u / n;
    ++decile[size_t(u * 10)];
  }
  EXPECT_NEAR(mean, 0.5, 0.005);
  const std::vector<double> flat(10, 0.1);
  EXPECT_LT(chi_square(decile, flat, n).statistic, chi_square_critical(9));
}

// The frequencies of each token against the warped softmax (an independent implementation in
// sampling_reference.h), for each warper and their combination.
TEST(Sampler, FrequenciesMatchTheWarpedSoftmax) {
  const std::vector<float> logits = random_logits(40, 3, 1.5f);
  const SampleMasks none;
  const int n = 40000;
  for (const SamplingParams& p : {params(0, 1.f, 1.f), params(0, 1.f, 0.6f), params(0, 1.f, 2.5f),
                                  params(8, 1.f, 1.f), params(0, 0.8f, 1.f), params(10, 0.9f, 0.7f),
                                  params(4, 0.9f, 1.5f)}) {
    SCOPED_TRACE("topk " + std::to_string(p.topk) + " topp " + std::to_string(p.topp) + " temperature " +
                 std::to_string(p.temperature));
    const std::vector<double> expected = warped_softmax(logits, none, p);
    Sampler sampler;
    const std::vector<double> ours = sampler.distribution(logits.data(), int(logits.size()), none, p);
    for (size_t t = 0; t < logits.size(); ++t) EXPECT_NEAR(ours[t], expected[t], 1e-12) << "token " << t;
    const ChiSquare c = chi_square(counts(logits, none, p, n), expected, n);
    EXPECT_GT(c.bins, 1);
    EXPECT_LT(c.statistic, chi_square_critical(c.bins - 1)) << "over " << c.bins << " bins";
    EXPECT_EQ(c.outside, 0) << "draws of tokens the warpers drop";
  }
}

// A wrong distribution fails the same test: the draws of temperature 1 against temperature
// 0.8's softmax (the test has the power to see what it checks).
TEST(Sampler, TheChiSquareTestSeesAWrongDistribution) {
  const std::vector<float> logits = random_logits(40, 3, 1.5f);
  const int n = 40000;
  const std::vector<double> other = warped_softmax(logits, {}, params(0, 1.f, 0.8f));
  const ChiSquare c = chi_square(counts(logits, {}, params(0, 1.f, 1.f), n), other, n);
  EXPECT_GT(c.statistic, chi_square_critical(c.bins - 1));
}

TEST(Sampler, TopKAndTopPNeverLeaveTheirSets) {
  Sampler sampler;
  for (uint32_t row = 0; row < 20; ++row) {
    const std::vector<float> logits = random_logits(500, 100 + row, 3.f);
    for (const SamplingParams& p : {params(5, 1.f, 1.f), params(0, 0.7f, 1.f), params(20, 0.3f, 1.7f)}) {
      const std::vector<double> allowed = warped_softmax(logits, {}, p);
      for (int i = 0; i < 500; ++i) {
        const Sample s = sampler.draw(logits.data(), 500, {}, p, sample_uniform(row, i, 1));
        ASSERT_GT(allowed[size_t(s.token)], 0.0) << "row " << row << " token " << s.token;
      }
    }
  }
  // top-k keeps the k largest and every token equal to the k-th (TopKLogitsWarper); top-p the
  // likeliest alone when it holds top_p; 1e-9 keeps the likeliest only.
  const std::vector<float> ties{1.f, 3.f, 2.f, 2.f, 0.f};
  EXPECT_EQ(warped_support(sampler.distribution(ties.data(), 5, {}, params(2, 1.f, 1.f))), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(warped_support(sampler.distribution(ties.data(), 5, {}, params(0, 1e-9f, 1.f))), (std::vector<int>{1}));
}

TEST(Sampler, MasksAndForcedTokens) {
  Sampler sampler;
  const std::vector<float> logits = random_logits(30, 9, 1.f);
  SampleMasks m;
  m.pad_id = 4;
  m.eos_id = 0;
  m.mask_eos = true;
  for (int i = 0; i < 2000; ++i) {
    const Sample s = sampler.draw(logits.data(), 30, m, params(0, 1.f, 1.f), sample_uniform(5, 0, i));
    ASSERT_NE(s.token, 4);
    ASSERT_NE(s.token, 0);
  }
  // The score is the model's log-prob, masks applied, before the warpers.
  const std::vector<double> model = warped_softmax(logits, m, params(0, 1.f, 1.f));
  const Sample s = sampler.draw(logits.data(), 30, m, params(3, 0.5f, 0.3f), 0.25);
  EXPECT_NEAR(s.logprob, std::log(model[size_t(s.token)]), 1e-5);
  m.forced_token = 7;
  EXPECT_EQ(sampler.draw(logits.data(), 30, m, params(0, 1.f, 1.f), 0.99).token, 7);
  m.force_eos = true;  // wins over the forced token, as ForcedEOS is applied last
  const Sample eos = sampler.draw(logits.data(), 30, m, params(0, 1.f, 1.f), 0.99);
  EXPECT_EQ(eos.token, 0);
  EXPECT_EQ(eos.logprob, 0.f);
}

TEST(SamplingOptions, ValidationNamesTheField) {
  auto refused = [](DecodeOptions o, const std::string& field) {
    try {
      o.validate(8, 255);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << field << " accepted";
  };
  DecodeOptions o;
  o.beam_size = 1;
  o.sampling_topk = -1;
  refused(o, "sampling_topk");
  o.sampling_topk = 0;
  for (float p : {0.f, -0.5f, 1.5f, std::nanf("")}) {
    o.sampling_topp = p;
    refused(o, "sampling_topp");
  }
  o.sampling_topp = 1.f;
  for (float t : {-1.f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    o.sampling_temperature = t;
    refused(o, "sampling_temperature");
  }
  o.sampling_temperature = 1.f;
  o.beam_size = 4;
  refused(o, "beam_size");
  o.beam_size = 1;
  o.num_hypotheses = 9;  // each sample a cache row: at most max_beam
  refused(o, "num_hypotheses");
  o.num_hypotheses = 8;
  EXPECT_NO_THROW(o.validate(8, 255));
  EXPECT_EQ(o.rows(), 8);
  // Not sampling (top-k 1, or temperature 0): the beam search's own rules.
  o.sampling_topk = 1;
  EXPECT_FALSE(o.samples());
  refused(o, "num_hypotheses");
  o.sampling_topk = 0;
  o.sampling_temperature = 0.f;
  EXPECT_FALSE(o.samples());
}

namespace {

DecodeOptions sampling(int n, uint64_t seed, int topk = 0, float topp = 1.f, float temperature = 1.f) {
  DecodeOptions o;
  o.beam_size = 1;
  o.num_hypotheses = n;
  o.sampling_topk = topk;
  o.sampling_topp = topp;
  o.sampling_temperature = temperature;
  o.has_seed = true;
  o.seed = seed;
  o.max_decoding_length = 30;
  return o;
}

}  // namespace

TEST(SamplingSearch, TopKOneAndTemperatureZeroAreGreedy) {
  for (int eos_step : {3, 8, 15}) {
    ScriptedEngine e;
    DecodeOptions greedy = beam(1);
    greedy.max_decoding_length = 30;
    const Translation g = run(e, {eos_step}, greedy).at(0).translation;
    const Translation k1 = run(e, {eos_step}, sampling(1, 5, 1)).at(0).translation;
    const Translation t0 = run(e, {eos_step}, sampling(1, 5, 0, 1.f, 0.f)).at(0).translation;
    EXPECT_EQ(k1.hypotheses.at(0).ids, g.hypotheses.at(0).ids);
    EXPECT_EQ(t0.hypotheses.at(0).ids, g.hypotheses.at(0).ids);
  }
}

TEST(SamplingSearch, ASeedReproducesAndSeedsDiffer) {
  ScriptedEngine e;
  std::set<std::vector<int>> outputs;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Translation a = run(e, {12}, sampling(1, seed)).at(0).translation;
    const Translation b = run(e, {12}, sampling(1, seed)).at(0).translation;
    EXPECT_EQ(a.hypotheses.at(0).ids, b.hypotheses.at(0).ids);
    EXPECT_EQ(a.hypotheses.at(0).score, b.hypotheses.at(0).score);
    outputs.insert(a.hypotheses.at(0).ids);
  }
  EXPECT_GT(outputs.size(), 10u);  // the scripted rows give each step three likely tokens
}

// n samples are n rows, each drawn as its own sample: sample 0 of n is the lone sample of the
// seed; the n come back best score first, each ending in EOS or at the length.
TEST(SamplingSearch, NumHypothesesAreIndependentSamples) {
  ScriptedEngine e;
  const auto r = run(e, {12}, sampling(5, 42));
  ASSERT_EQ(e.steps().front(), 5u);  // five rows
  const std::vector<Hypothesis>& h = r.at(0).translation.hypotheses;
  ASSERT_EQ(h.size(), 5u);
  for (size_t i = 1; i < h.size(); ++i) EXPECT_GE(h[i - 1].score, h[i].score);
  std::set<std::vector<int>> distinct;
  for (const Hypothesis& x : h) distinct.insert(x.ids);
  EXPECT_GT(distinct.size(), 1u);
  const Translation lone = run(e, {12}, sampling(1, 42)).at(0).translation;
  EXPECT_TRUE(distinct.count(lone.hypotheses.at(0).ids));
}

// Seeded sentences beside greedy, beam and other sampling sentences that join at any step, on
// an engine that computes each step at once and on one that overlaps them (the others follow
// the step in flight; the sampling ones never do): each equals its lone run.
TEST(SamplingSearch, ASeededSentenceEqualsItsLoneRunInAMixedLoop) {
  const std::vector<int> eos_steps{12, 4, 20, 9, 15, 6, 11, 3, 18, 7};
  const std::vector<DecodeOptions> options{sampling(1, 1),        beam(4),           sampling(3, 2, 3, 0.9f, 0.8f),
                                           beam(1),               sampling(2, 3, 0, 0.7f), beam(2),
                                           sampling(1, 4, 2),     sampling(4, 5, 0, 1.f, 1.5f), beam(3),
                                           sampling(1, 1)};
  for (bool overlapping : {false, true}) {
    SCOPED_TRACE(overlapping ? "overlapping engine" : "engine computing each step at once");
    std::vector<Translation> alone;
    for (size_t i = 0; i < eos_steps.size(); ++i) {
      ScriptedEngine e;
      e.overlapping = overlapping;
      alone.push_back(run(e, {eos_steps[i]}, options[i]).at(0).translation);
    }
    ScriptedEngine e;
    e.overlapping = overlapping;
    DecodeLoop loop(e, kConfig, {5, 14, 4});
    std::map<uint64_t, Translation> together;
    size_t next = 0;
    for (int step = 0; together.size() < eos_steps.size(); ++step) {
      ASSERT_LT(step, 2000);
      if (next < eos_steps.size() && step % 3 == 0 && loop.can_admit(options[next])) {
        loop.admit({{next, {eos_steps[next], kEos}, options[next]}});
        ++next;
      }
      for (auto& f : loop.step().finished) together[f.id] = std::move(f.translation);
    }
    if (overlapping) EXPECT_GT(e.followed_groups.load(), 0);  // the beam sentences did follow
    for (size_t i = 0; i < eos_steps.size(); ++i) {
      ASSERT_EQ(together.at(i).hypotheses.size(), alone[i].hypotheses.size()) << "sentence " << i;
      for (size_t h = 0; h < alone[i].hypotheses.size(); ++h) {
        EXPECT_EQ(together.at(i).hypotheses[h].ids, alone[i].hypotheses[h].ids) << "sentence " << i << " hyp " << h;
        EXPECT_EQ(together.at(i).hypotheses[h].score, alone[i].hypotheses[h].score) << "sentence " << i;
      }
    }
  }
}

// With a repetition control, a sampling sentence's edits apply on the host to the logits it
// draws from (transformers' _sample: processors, then warpers): no_repeat_ngram_size 1 never
// draws a token its sample holds, whatever the seed (the scripted engine applies no edits).
TEST(SamplingSearch, RepetitionEditsApplyToTheDraws) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    ScriptedEngine e;
    DecodeOptions o = sampling(2, seed, 0, 1.f, 2.f);
    o.no_repeat_ngram_size = 1;
    const auto r = run(e, {20}, o);
    for (const Hypothesis& h : r.at(0).translation.hypotheses) {
      std::set<int> seen;
      for (int id : h.ids) EXPECT_TRUE(seen.insert(id).second) << "seed " << seed << ": token " << id << " drawn twice";
    }
  }
}
