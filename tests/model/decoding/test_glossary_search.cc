// Glossary (docs/decoding.md, "Glossary"): the constrained beam search on the CPU engine with
// the demo model. Each required target term (its ids) is in every hypothesis of the n-best and
// in the best one's text (where no entry applies, the sentence takes plain beam search: the
// server's test_glossary_server holds that); constrained and plain sentences sharing the steps of one decode loop each equal
// their lone run; what the search cannot honour is refused naming the field. PhraseConstraints'
// state machine on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "model/decoding/controls/phrase_constraints.h"
#include "model/decoding/decode_loop.h"
#include "model/error.h"
#include "model/translator.h"
#include "tests/support/error_of.h"
#include "tests/support/glossary_cases.h"
#include "tests/support/golden.h"
#include "tests/support/loop_runs.h"

using namespace nmt;

namespace {

Translator& demo() {
  static std::unique_ptr<Translator> t = [] {
    TranslatorOptions o;
    o.device = Device::kCpu;
    o.precision = Precision::kFloat32;
    return Translator::load(test::demo_model_dir(), o);
  }();
  return *t;
}

std::vector<std::vector<int>> phrases(const test::GlossaryCase& c) {
  std::vector<std::vector<int>> out;
  for (const std::string& t : c.targets) out.push_back(demo().encode_target(t));
  return out;
}

}  // namespace

TEST(PhraseConstraints, TracksProgressAndNeed) {
  const PhraseConstraints c({{5, 6, 7}, {9}, {5, 6, 7}});  // the duplicate counts once
  EXPECT_EQ(c.total(), 4);
  PhraseConstraints::State s;
  EXPECT_EQ(c.need(s), 4);
  std::vector<int> adv;
  c.advancing(s, &adv);
  EXPECT_EQ(adv, (std::vector<int>{5, 9}));
  s = c.next(s, 5);
  EXPECT_EQ(c.need(s), 3);
  s = c.next(s, 8);  // broke off: the progress is lost
  EXPECT_EQ(c.need(s), 4);
  for (int t : {5, 6, 7}) s = c.next(s, t);
  EXPECT_EQ(c.need(s), 1);
  s = c.next(s, 5);  // a phrase held already does not count again
  EXPECT_EQ(c.need(s), 1);
  s = c.next(s, 9);
  EXPECT_EQ(c.need(s), 0);
  // a phrase that is a prefix of another: both held by the longer one's tokens
  const PhraseConstraints p({{3}, {3, 4}});
  PhraseConstraints::State q = p.next({}, 3);
  EXPECT_EQ(p.need(q), 1);
  q = p.next(q, 4);
  EXPECT_EQ(p.need(q), 0);
}

TEST(GlossarySearch, EveryRequiredTermIsInEveryHypothesis) {
  for (int beam : {2, 4, 6}) {
    for (const test::GlossaryCase& c : test::kGlossaryCases) {
      SCOPED_TRACE(c.source + " beam " + std::to_string(beam));
      DecodeOptions o;
      o.beam_size = beam;
      o.num_hypotheses = beam;
      o.glossary_phrases = phrases(c);
      const Translation t = demo().translate({c.source}, o).at(0);
      ASSERT_EQ(t.hypotheses.size(), size_t(beam));
      for (const Hypothesis& h : t.hypotheses) {
        for (const auto& p : o.glossary_phrases) EXPECT_TRUE(test::holds_phrase(h.ids, p)) << h.text;
        EXPECT_EQ(h.ids.back(), demo().config().eos_id);
      }
      for (size_t i = 1; i < t.hypotheses.size(); ++i) EXPECT_GE(t.hypotheses[i - 1].score, t.hypotheses[i].score);
      for (const std::string& term : c.targets) EXPECT_NE(t.hypotheses[0].text.find(term), std::string::npos) << t.hypotheses[0].text;
      if (beam == 4) std::cout << c.source << " -> " << t.hypotheses[0].text << "\n";
    }
  }
}

TEST(GlossarySearch, TermsFillTheWholeLengthWhenTheyMust) {
  // The terms and EOS take exactly max_decoding_length: the search still holds every one.
  const test::GlossaryCase& c = test::kGlossaryCases[1];
  DecodeOptions o;
  o.glossary_phrases = phrases(c);
  size_t tokens = 0;
  for (const auto& p : o.glossary_phrases) tokens += p.size();
  o.max_decoding_length = int(tokens) + 1;
  const Translation t = demo().translate({c.source}, o).at(0);
  for (const auto& p : o.glossary_phrases) EXPECT_TRUE(test::holds_phrase(t.hypotheses.at(0).ids, p));
  o.max_decoding_length = int(tokens);  // no room for EOS: refused, not dropped
  EXPECT_NE(test::error_of([&] { demo().translate({c.source}, o); }).find("glossary"), std::string::npos);
}

// The constrained best is never better than the unconstrained one (it is a search over fewer
// hypotheses), and the n-best stays full.
TEST(GlossarySearch, ConstrainedBestScoresNoHigherThanPlain) {
  DecodeOptions plain;
  plain.num_hypotheses = 3;
  for (const test::GlossaryCase& c : test::kGlossaryCases) {
    const Translation a = demo().translate({c.source}, plain).at(0);
    DecodeOptions o = plain;
    o.glossary_phrases = phrases(c);
    const Translation b = demo().translate({c.source}, o).at(0);
    ASSERT_EQ(a.hypotheses.size(), 3u);
    ASSERT_EQ(b.hypotheses.size(), 3u);
    EXPECT_LE(b.hypotheses[0].score, a.hypotheses[0].score + 1e-4f);
  }
}

// Constrained and plain sentences in one loop, admitted at different steps: each as alone.
TEST(GlossarySearch, MixedLoadEqualsLoneTranslations) {
  std::vector<LoopSentence> mixed;
  uint64_t id = 0;
  for (const test::GlossaryCase& c : test::kGlossaryCases) {
    DecodeOptions plain;
    plain.num_hypotheses = 2;
    DecodeOptions constrained = plain;
    constrained.glossary_phrases = phrases(c);
    const std::vector<int> src = demo().encode_source(c.source);
    mixed.push_back({id++, src, plain});
    mixed.push_back({id++, src, constrained});
  }
  const auto together = test::run_loop(demo(), mixed, true);
  ASSERT_EQ(together.size(), mixed.size());
  for (const LoopSentence& s : mixed) {
    const Translation a = test::run_loop(demo(), {s}, false).at(s.id);
    const Translation& b = together.at(s.id);
    ASSERT_EQ(b.hypotheses.size(), a.hypotheses.size()) << "sentence " << s.id;
    for (size_t h = 0; h < a.hypotheses.size(); ++h) {
      EXPECT_EQ(b.hypotheses[h].ids, a.hypotheses[h].ids) << "sentence " << s.id;
      EXPECT_NEAR(b.hypotheses[h].score, a.hypotheses[h].score, 1e-5 * std::max(1.f, std::abs(a.hypotheses[h].score)));
    }
    for (const auto& p : s.options.glossary_phrases) EXPECT_TRUE(test::holds_phrase(b.hypotheses[0].ids, p));
  }
}

TEST(GlossarySearch, RefusesWhatItCannotHonourNamingTheField) {
  const std::string src = test::kGlossaryCases[0].source;
  DecodeOptions o;
  o.glossary_phrases = phrases(test::kGlossaryCases[0]);
  auto refused = [&](DecodeOptions x, const std::string& words) {
    const std::string e = test::error_of([&] { demo().translate({src}, x); });
    EXPECT_NE(e.find(words), std::string::npos) << e;
  };
  DecodeOptions s = o;
  s.beam_size = 1;
  s.sampling_topk = 0;
  refused(s, "glossary cannot be combined with sampling");
  DecodeOptions g = o;
  g.beam_size = 1;
  refused(g, "glossary needs beam search");
  DecodeOptions p = o;
  p.target_prefix = demo().encode_target("Ein");
  refused(p, "glossary cannot be combined with target_prefix");
  DecodeOptions r = o;
  r.no_repeat_ngram_size = 2;
  refused(r, "glossary cannot be combined with no_repeat_ngram_size");
  DecodeOptions e = o;
  e.glossary_phrases = {{}};
  refused(e, "glossary: the target term of entry 0 has no tokens");
  DecodeOptions v = o;
  v.glossary_phrases = {{demo().config().target_vocab_size}};
  refused(v, "glossary holds id");
  DecodeOptions eos = o;
  eos.glossary_phrases = {{demo().config().eos_id}};
  refused(eos, "glossary holds </s>");
  DecodeOptions many = o;
  many.glossary_phrases.assign(65, {10});
  refused(many, "at most 64");
}
