// target_prefix and Score on the CPU engine (float32, docs/decoding.md): the references of
// tests/conformance/controls/prefix_score (transformers' generate() with decoder_input_ids and
// a forward pass with labels) token-identical with scores within kScoreTolerance; scoring
// the engine's own translations gives their scores; sentences with a prefix, without one and
// scored, sharing the steps of one decode loop, each equal their lone run; bad values are
// refused naming the field.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <set>

#include "model/decoding/decode_loop.h"
#include "model/error.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance_cases.h"
#include "tests/support/conformance/prefix_score_cases.h"
#include "tests/support/error_of.h"
#include "tests/support/golden.h"
#include "tests/support/loop_runs.h"

using namespace nmt;

namespace {

std::unique_ptr<Translator> cpu_translator(const std::string& dir) {
  TranslatorOptions o;
  o.device = Device::kCpu;
  o.precision = Precision::kFloat32;
  return Translator::load(dir, o);
}

Translator& demo() {
  static std::unique_ptr<Translator> t = cpu_translator(test::demo_model_dir());
  return *t;
}

const std::vector<std::string> kSources = {"A dog runs across the yard.", "Two men are playing chess in the park.",
                                           "A woman in a red dress is singing.", "The children are eating ice cream."};

}  // namespace

TEST(PrefixScoreConformance, MatchesTransformersOnEveryModel) {
  const std::vector<test::PrefixScoreCase> cases = test::load_prefix_score_cases();
  ASSERT_FALSE(cases.empty()) << test::prefix_score_references_path() << " holds no cases";
  std::map<std::string, std::vector<test::PrefixScoreCase>> by_model;
  for (const auto& c : cases) by_model[c.model_dir].push_back(c);
  std::set<std::string> kinds;
  for (const auto& [dir, list] : by_model) {
    auto translator = cpu_translator(dir);
    const test::PrefixScoreComparison r = test::compare_prefix_score(*translator, list);
    std::cout << list[0].model << ": " << r.identical << " / " << r.cases << " identical, worst score error "
              << r.worst_score_error << " (" << r.worst_where << ")\n";
    EXPECT_EQ(r.identical, r.cases) << r.first_difference;
    EXPECT_LE(r.worst_score_error, test::kScoreTolerance) << list[0].model;
    for (const auto& c : list) kinds.insert(list[0].model + "/" + c.kind);
  }
  EXPECT_GE(by_model.size(), 3u) << "the references cover the demo model, a variant and a family model";
  EXPECT_GE(kinds.size(), 2 * by_model.size()) << "every model has prefix and score cases";
}

TEST(PrefixScore, ScoringTheOwnTranslationGivesItsScore) {
  for (int beam : {1, 4}) {
    DecodeOptions o;
    o.beam_size = beam;
    const std::vector<Translation> t = demo().translate(kSources, o);
    std::vector<std::vector<int>> targets;
    for (const auto& x : t) {
      std::vector<int> ids = x.hypotheses[0].ids;
      ids.pop_back();  // </s>: Score appends it
      targets.push_back(ids);
    }
    std::vector<std::vector<int>> sources;
    for (const auto& s : kSources) sources.push_back(demo().encode_source(s));
    const std::vector<Hypothesis> scored = demo().score_ids(sources, targets, DecodeOptions{});
    ASSERT_EQ(scored.size(), t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      const Hypothesis& h = t[i].hypotheses[0];
      EXPECT_EQ(scored[i].ids, h.ids);
      EXPECT_NEAR(scored[i].score, h.score, 1e-5 * std::max(1.f, std::abs(h.score))) << "beam " << beam << " " << i;
      ASSERT_EQ(scored[i].token_scores.size(), h.ids.size());
      ASSERT_EQ(h.token_scores.size(), h.ids.size());
      double sum = 0;
      for (size_t k = 0; k < h.ids.size(); ++k) {
        EXPECT_NEAR(scored[i].token_scores[k], h.token_scores[k], 1e-4) << i << " token " << k;
        sum += scored[i].token_scores[k];
      }
      EXPECT_NEAR(sum / double(h.ids.size()), scored[i].score, 1e-5);
    }
  }
}

TEST(PrefixScore, HypothesesContinueTheTextPrefix) {
  DecodeOptions o;
  o.target_prefix = demo().encode_target("Zwei Frauen");
  ASSERT_FALSE(o.target_prefix.empty());
  for (int beam : {1, 4}) {
    o.beam_size = beam;
    o.num_hypotheses = beam;
    const std::vector<Translation> t = demo().translate(kSources, o);
    for (const auto& x : t) {
      for (const auto& h : x.hypotheses) {
        ASSERT_GT(h.ids.size(), o.target_prefix.size());
        EXPECT_TRUE(std::equal(o.target_prefix.begin(), o.target_prefix.end(), h.ids.begin()));
        EXPECT_EQ(h.text.rfind("Zwei Frauen", 0), 0u) << h.text;
        for (size_t k = 0; k < o.target_prefix.size(); ++k) EXPECT_EQ(h.token_scores[k], 0.f);
      }
    }
  }
}

// Prefixed, plain and scored sentences in one loop, at different steps: each as alone.
TEST(PrefixScore, MixedLoadEqualsLoneTranslations) {
  std::vector<LoopSentence> mixed;
  std::vector<std::vector<int>> sources;
  for (size_t i = 0; i < 2; ++i) sources.push_back(demo().encode_source(kSources[i]));
  const std::vector<int> prefix = demo().encode_target("Ein Mann");
  const std::vector<int> target = demo().encode_target("Ein Hund rennt über den Hof.");
  uint64_t id = 0;
  for (const auto& src : sources) {
    for (int beam : {1, 4}) {
      DecodeOptions plain;
      plain.beam_size = beam;
      DecodeOptions prefixed = plain;
      prefixed.target_prefix = prefix;
      mixed.push_back({id++, src, plain});
      mixed.push_back({id++, src, prefixed});
    }
    DecodeOptions scored;
    scored.beam_size = 1;
    scored.score = true;
    scored.score_target = target;
    mixed.push_back({id++, src, scored});
  }
  // staggered: one newcomer a step, so that sentences share steps at different positions
  const auto together = test::run_loop(demo(), mixed, true);
  ASSERT_EQ(together.size(), mixed.size());
  for (const LoopSentence& s : mixed) {
    const auto alone = test::run_loop(demo(), {s}, false);
    const Hypothesis& a = alone.at(s.id).hypotheses.at(0);
    const Hypothesis& b = together.at(s.id).hypotheses.at(0);
    EXPECT_EQ(b.ids, a.ids) << "sentence " << s.id;
    EXPECT_NEAR(b.score, a.score, 1e-5 * std::max(1.f, std::abs(a.score))) << "sentence " << s.id;
  }
}

TEST(PrefixScore, RefusesBadPrefixesAndTargetsNamingTheField) {
  DecodeOptions o;
  o.max_decoding_length = 3;
  o.target_prefix = {10, 11, 12};
  EXPECT_NE(test::error_of([&] { demo().translate(kSources, o); }).find("target_prefix"), std::string::npos);
  o.max_decoding_length = 255;
  o.target_prefix = {10, demo().config().eos_id};
  EXPECT_NE(test::error_of([&] { demo().translate(kSources, o); }).find("target_prefix holds </s>"), std::string::npos);
  o.target_prefix = {demo().config().target_vocab_size};
  EXPECT_NE(test::error_of([&] { demo().translate(kSources, o); }).find("target_prefix holds id"), std::string::npos);
  DecodeOptions s;
  s.max_decoding_length = 3;
  EXPECT_NE(test::error_of([&] { demo().score({kSources[0]}, {"Ein Hund rennt über den Hof."}, s); }).find("targets"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { demo().score(kSources, {"Ein Hund."}, DecodeOptions{}); }).find("targets has 1 entries"),
            std::string::npos);
}
