// The decode loop against a scripted engine: sentences joining and leaving at any step, slots
// and cache rows reused, results independent of the other sentences in the loop,
// out-of-memory steps; on an engine that overlaps steps, the same with two steps in flight,
// each following the one before it (StepGroup::follows).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include "tests/model/decoding/scripted_loop.h"

using namespace nmt;
using namespace nmt::test;

TEST(DecodeLoop, RemovedSentenceLeavesAtTheNextStep) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {4, 16, 4});
  DecodeOptions o = beam(4);
  o.max_decoding_length = 20;
  loop.admit({{1, {50, kEos}, o}, {2, {50, kEos}, o}});
  loop.step();
  loop.step();
  loop.remove(2);
  EXPECT_EQ(loop.active_rows(), 4);
  while (!loop.idle()) {
    for (const auto& f : loop.step().finished) EXPECT_EQ(f.id, 1u);
  }
  EXPECT_EQ(e.steps()[1], 8u);
  EXPECT_EQ(e.steps()[2], 4u);
}

TEST(DecodeLoop, SentencesJoinAtAnyStepWithTheSameResultAsAlone) {
  // Alone: each sentence in its own loop.
  const std::vector<int> eos_steps{3, 12, 1, 7, 20, 5, 9, 2};
  const std::vector<DecodeOptions> options{beam(4), beam(1), beam(2), beam(4), beam(3), beam(1), beam(4), beam(2)};
  std::vector<Translation> alone;
  for (size_t i = 0; i < eos_steps.size(); ++i) {
    ScriptedEngine e;
    alone.push_back(run(e, {eos_steps[i]}, options[i]).at(0).translation);
  }
  // Together: one joins every other step, with too few slots and rows for all, so slots and
  // rows freed by finished sentences are reused.
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {3, 9, 4});
  std::map<uint64_t, Translation> together;
  size_t next = 0;
  for (int step = 0; together.size() < eos_steps.size(); ++step) {
    if (next < eos_steps.size() && step % 2 == 0 && loop.can_admit(options[next])) {
      loop.admit({{next, {eos_steps[next], kEos}, options[next]}});
      ++next;
    }
    EXPECT_LE(loop.active_rows(), 9);
    EXPECT_LE(loop.active_sentences(), 3);
    for (auto& f : loop.step().finished) together[f.id] = std::move(f.translation);
  }
  for (size_t i = 0; i < eos_steps.size(); ++i) {
    ASSERT_EQ(together[i].hypotheses.size(), alone[i].hypotheses.size()) << i;
    EXPECT_EQ(together[i].hypotheses[0].ids, alone[i].hypotheses[0].ids) << i;
    EXPECT_EQ(together[i].hypotheses[0].score, alone[i].hypotheses[0].score) << i;
  }
}

TEST(DecodeLoop, RefusesWhatCanNeverFit) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {2, 4, 8});
  std::string why;
  EXPECT_FALSE(loop.fits(9, beam(1), &why));
  EXPECT_NE(why.find("9 tokens"), std::string::npos) << why;
  EXPECT_FALSE(loop.fits(3, beam(5), &why));
  EXPECT_NE(why.find("beam 5"), std::string::npos) << why;
  EXPECT_TRUE(loop.fits(8, beam(4)));
  loop.admit({{1, {30, kEos}, beam(4)}});
  EXPECT_FALSE(loop.can_admit(beam(1)));  // rows are all taken
  EXPECT_THROW(loop.admit({{2, {30, kEos}, beam(1)}}), Error);
  EXPECT_EQ(loop.active_sentences(), 1);
}

TEST(DecodeLoop, EngineFailureEmptiesTheLoopAndItKeepsServing) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {2, 8, 4});
  loop.admit({{1, {30, kEos}, beam(4)}});
  e.fail_next_step = true;
  EXPECT_THROW(loop.step(), Error);
  EXPECT_TRUE(loop.idle());
  EXPECT_EQ(loop.active_rows(), 0);
  loop.admit({{2, {2, kEos}, beam(4)}, {3, {2, kEos}, beam(4)}});
  int finished = 0;
  while (!loop.idle()) finished += int(loop.step().finished.size());
  EXPECT_EQ(finished, 2);
}

TEST(DecodeLoop, OutOfMemoryShedsTheFurthestSentencesWhenAsked) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {4, 8, 4});
  loop.set_follow_rows(1);
  loop.shed_on_out_of_memory(true);
  loop.admit({{1, {50, kEos}, beam(1)}});
  for (int i = 0; i < 5; ++i) loop.step();  // sentence 1 at position 5
  loop.admit({{2, {4, kEos}, beam(2)}});  // ends before position 7
  loop.step();  // sentence 2 encoded (riding on this step); it steps from the next one
  e.out_of_memory_at_position = 7;
  StepReport report = loop.step();  // sentence 1 at 6: fits
  EXPECT_TRUE(report.failed.empty());
  report = loop.step();  // sentence 1 at 7: out of memory; sentence 2 (at 1) goes on
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_EQ(report.failed[0].id, 1u);
  EXPECT_EQ(report.failed[0].code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(loop.active_sentences(), 1);
  EXPECT_EQ(loop.active_rows(), 2);  // sentence 1's row is free again
  std::vector<FinishedSentence> finished;
  while (!loop.idle()) {
    for (auto& f : loop.step().finished) finished.push_back(std::move(f));
  }
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].id, 2u);
  ScriptedEngine alone_engine;
  EXPECT_EQ(finished[0].translation.hypotheses[0].ids,
            run(alone_engine, {4}, beam(2))[0].translation.hypotheses[0].ids);

  // Newcomers admitted as a step must grow the caches are not encoded on that step, so
  // that the growth's failure leaves a step that can be repeated (else this would throw).
  e.out_of_memory_at_position = -1;
  loop.admit({{3, {50, kEos}, beam(1)}});
  for (int i = 0; i < 3; ++i) loop.step();  // sentence 3 at position 3
  loop.admit({{4, {4, kEos}, beam(1)}});
  e.out_of_memory_at_position = 3;
  report = loop.step();
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_EQ(report.failed[0].id, 3u);
  EXPECT_EQ(report.encoded, 1);  // the loop, empty then, encoded sentence 4 at once
  e.out_of_memory_at_position = -1;
  int more = 0;
  while (!loop.idle()) more += int(loop.step().finished.size());
  EXPECT_EQ(more, 1);

  // An engine that does not say where its caches end: a step carrying an encode may have
  // failed after it ran, so it is not repeated.
  e.report_cache_positions = false;
  loop.admit({{5, {50, kEos}, beam(1)}});
  e.out_of_memory_at_position = -1;
  for (int i = 0; i < 3; ++i) loop.step();
  loop.admit({{6, {4, kEos}, beam(1)}});
  e.out_of_memory_at_position = 3;
  EXPECT_THROW(loop.step(), Error);
  EXPECT_TRUE(loop.idle());
}

TEST(DecodeLoop, OutOfMemoryThrowsByDefault) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {2, 4, 4});
  loop.admit({{1, {50, kEos}, beam(1)}});
  loop.step();
  e.out_of_memory_at_position = 1;
  EXPECT_THROW(loop.step(), Error);  // Translator needs every sentence of its batch
  EXPECT_TRUE(loop.idle());
}

// ---- an engine that overlaps steps (a device's): a step in flight across step() calls, and
// from follow_rows on two, each following the beams the one before it chose.

namespace {

// Each sentence's translation alone, through a loop on an engine that does not overlap.
Translation alone(int eos_step, const DecodeOptions& o) {
  ScriptedEngine e;
  return run(e, {eos_step}, o).at(0).translation;
}

// Steps the loop until it is idle (at most 100 calls); the finished sentences by id.
std::map<uint64_t, Translation> finish_all(DecodeLoop& loop) {
  std::map<uint64_t, Translation> finished;
  for (int call = 0; !loop.idle() && call < 100; ++call) {
    for (auto& f : loop.step().finished) finished[f.id] = std::move(f.translation);
  }
  return finished;
}

void expect_same(const Translation& got, const Translation& want, uint64_t id) {
  ASSERT_EQ(got.hypotheses.size(), want.hypotheses.size()) << id;
  for (size_t h = 0; h < want.hypotheses.size(); ++h) {
    EXPECT_EQ(got.hypotheses[h].ids, want.hypotheses[h].ids) << id << " hypothesis " << h;
    EXPECT_EQ(got.hypotheses[h].score, want.hypotheses[h].score) << id << " hypothesis " << h;
  }
}

}  // namespace

TEST(DecodeLoop, FollowingStepsGiveEachSentenceItsResultAlone) {
  std::mt19937 rng(7);
  std::vector<int> eos_steps;
  std::vector<DecodeOptions> options;
  for (int i = 0; i < 40; ++i) {
    eos_steps.push_back(1 + int(rng() % 20));
    DecodeOptions o = beam(1 + int(rng() % 4));
    if (i % 5 == 1) o.min_decoding_length = 4;
    if (i % 7 == 2) o.max_decoding_length = 6;
    if (i % 3 == 0 && o.beam_size > 1) o.num_hypotheses = 2;
    if (i % 4 == 3) o.forced_bos_id = 1 + i % 3;  // a target-language token, first
    options.push_back(o);
  }
  ScriptedEngine e;
  e.overlapping = true;
  DecodeLoop loop(e, kConfig, {12, 30, 4});
  loop.set_follow_rows(1);
  std::map<uint64_t, Translation> together;
  size_t next = 0;
  for (int call = 0; together.size() < eos_steps.size(); ++call) {
    ASSERT_LT(call, 10000);
    // Random arrivals, as many as fit.
    for (int n = int(rng() % 4); n > 0 && next < eos_steps.size() && loop.can_admit(options[next]); --n, ++next)
      loop.admit({{next, {eos_steps[next], kEos}, options[next]}});
    EXPECT_LE(loop.active_rows(), 30);
    for (auto& f : loop.step().finished) together[f.id] = std::move(f.translation);
  }
  EXPECT_TRUE(loop.idle());
  for (size_t i = 0; i < eos_steps.size(); ++i) {
    expect_same(together[i], alone(eos_steps[i], options[i]), i);
    // The forced token leads every hypothesis (also where the first step was followed).
    for (const Hypothesis& h : together[i].hypotheses) {
      if (options[i].forced_bos_id >= 0) EXPECT_EQ(h.ids.at(0), options[i].forced_bos_id) << i;
    }
  }
  // The steps alternated between the lanes, and most sentences' steps followed the one before.
  const std::vector<int> lanes = e.lanes();
  for (size_t i = 1; i < lanes.size(); ++i) EXPECT_NE(lanes[i], lanes[i - 1]) << "step " << i;
  EXPECT_GT(e.followed_groups.load(), 200);
  EXPECT_EQ(e.releases, 40);
  EXPECT_EQ(e.early_releases, 0);
  EXPECT_EQ(e.unreleased_reuses, 0);
}

// A lone sentence: every step after its first follows the one before; a sentence that ends at
// its maximum length costs no step more, one that ends on EOS one step whose result is dropped.
TEST(DecodeLoop, ALoneSentenceFollowsEveryStepAfterItsFirst) {
  DecodeOptions capped = beam(4);
  capped.max_decoding_length = 7;
  for (const auto& [eos_step, o, extra] : {std::tuple<int, DecodeOptions, size_t>{50, capped, 0},
                                           std::tuple<int, DecodeOptions, size_t>{5, beam(4), 1}}) {
    ScriptedEngine e;
    e.overlapping = true;
    const auto r = run(e, {eos_step}, o, {16, 64, 4}, 1);
    const int steps = r.at(0).steps;
    EXPECT_EQ(e.steps().size(), size_t(steps) + extra) << "eos_step " << eos_step;
    EXPECT_EQ(e.followed_groups.load(), int(e.steps().size()) - 1) << "eos_step " << eos_step;
    expect_same(r.at(0).translation, alone(eos_step, o), 0);
  }
  ScriptedEngine e;
  e.overlapping = true;
  EXPECT_EQ(run(e, {50}, capped, {16, 64, 4}, 1).at(0).steps, 7);
}

// Below follow_rows one step at a time stays in flight and none follows; a loop that grows
// past it keeps two in flight, and drops back to one below it.
TEST(DecodeLoop, StepsFollowOnlyFromFollowRows) {
  {
    ScriptedEngine e;
    e.overlapping = true;
    const auto r = run(e, {5}, beam(4), {16, 64, 4}, 0);  // never
    EXPECT_EQ(e.followed_groups.load(), 0);
    EXPECT_EQ(e.steps().size(), size_t(r.at(0).steps));
    const std::vector<int> lanes = e.lanes();
    for (size_t i = 1; i < lanes.size(); ++i) EXPECT_EQ(lanes[i], 0) << i;
  }
  ScriptedEngine e;
  e.overlapping = true;
  DecodeLoop loop(e, kConfig, {4, 16, 4});
  loop.set_follow_rows(8);
  loop.admit({{1, {12, kEos}, beam(4)}});
  for (int i = 0; i < 3; ++i) loop.step();
  EXPECT_EQ(e.followed_groups.load(), 0) << "4 rows";
  loop.admit({{2, {4, kEos}, beam(4)}});
  std::map<uint64_t, Translation> finished;
  for (int call = 0; !loop.idle() && call < 100; ++call) {
    const int before = e.followed_groups.load();
    const int rows = loop.active_rows();
    for (auto& f : loop.step().finished) finished[f.id] = std::move(f.translation);
    if (rows < 8) EXPECT_EQ(e.followed_groups.load(), before) << "call " << call << ": " << rows << " rows";
  }
  EXPECT_GT(e.followed_groups.load(), 3) << "8 rows";
  ASSERT_EQ(finished.size(), 2u);
  expect_same(finished.at(1), alone(12, beam(4)), 1);
  expect_same(finished.at(2), alone(4, beam(4)), 2);
}

// A newcomer that arrives while the only sentence's last step (forced EOS) is in flight rides
// its encode on a submit that steps nothing; it then decodes as alone, and so does the other.
TEST(DecodeLoop, NewcomerBehindALastStepEncodesOnAStepOfNoSentence) {
  ScriptedEngine e;
  e.overlapping = true;
  DecodeLoop loop(e, kConfig, {4, 16, 4});
  loop.set_follow_rows(1);
  DecodeOptions capped = beam(4);
  capped.max_decoding_length = 3;
  loop.admit({{1, {50, kEos}, capped}});
  loop.step();  // positions 0 and 1 in flight
  loop.step();  // position 2, its last (forced EOS)
  loop.admit({{2, {3, kEos}, beam(4)}});
  const std::map<uint64_t, Translation> finished = finish_all(loop);
  ASSERT_EQ(finished.size(), 2u);
  expect_same(finished.at(1), alone(50, capped), 1);
  expect_same(finished.at(2), alone(3, beam(4)), 2);
  EXPECT_EQ(e.encoded, 2);
}

TEST(DecodeLoop, SentenceRemovedInFlightFreesItsRowsAndGivesNoResult) {
  ScriptedEngine e;
  e.overlapping = true;
  DecodeLoop loop(e, kConfig, {2, 8, 4});
  loop.set_follow_rows(1);
  DecodeOptions o = beam(4);
  o.max_decoding_length = 20;
  loop.admit({{1, {50, kEos}, o}, {2, {50, kEos}, o}});
  for (int i = 0; i < 4; ++i) loop.step();
  loop.remove(2);  // two steps in flight hold it: its slot and rows wait for them
  EXPECT_EQ(loop.active_sentences(), 2);
  EXPECT_EQ(loop.active_rows(), 8);
  EXPECT_FALSE(loop.can_admit(beam(4)));
  EXPECT_EQ(e.releases, 0);
  int calls = 0;
  for (; !loop.can_admit(beam(4)) && calls < 10; ++calls) loop.step();
  EXPECT_EQ(calls, 2);  // one collect() per call: the second collects the newer step
  EXPECT_EQ(e.releases, 1);
  EXPECT_EQ(loop.active_sentences(), 1);
  EXPECT_EQ(loop.active_rows(), 4);
  loop.admit({{3, {3, kEos}, beam(4)}});  // takes sentence 2's slot and rows
  const std::map<uint64_t, Translation> finished = finish_all(loop);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished.count(2), 0u);
  expect_same(finished.at(1), alone(50, o), 1);
  expect_same(finished.at(3), alone(3, beam(4)), 3);
  EXPECT_EQ(e.releases, 3);
  EXPECT_EQ(e.early_releases, 0);
  EXPECT_EQ(e.unreleased_reuses, 0);
}

// Every sentence admitted is released once, after the steps holding it were collected and
// before its slot takes another; a loop destroyed with sentences releases them too.
TEST(DecodeLoop, ReleasesEachSentenceOnceAfterItsStepsAndBeforeItsSlotIsReused) {
  for (const bool overlapping : {false, true}) {
    ScriptedEngine e;
    e.overlapping = overlapping;
    {
      DecodeLoop loop(e, kConfig, {2, 4, 4});
      loop.set_follow_rows(1);
      std::map<uint64_t, Translation> finished;
      uint64_t next = 0;
      for (int call = 0; finished.size() < 12 && call < 500; ++call) {
        if (next < 12 && loop.can_admit(beam(2))) {
          loop.admit({{next, {1 + int(next % 5), kEos}, beam(2)}});
          if (next % 4 == 3) loop.remove(next);  // some leave while a step in flight holds them
          if (next % 4 == 3) finished[next] = {};
          ++next;
        }
        for (auto& f : loop.step().finished) finished[f.id] = std::move(f.translation);
      }
      EXPECT_EQ(finished.size(), 12u) << "overlapping " << overlapping;
      EXPECT_EQ(e.releases, 12) << "overlapping " << overlapping;
      loop.admit({{100, {50, kEos}, beam(2)}});
      loop.step();
    }
    EXPECT_EQ(e.releases, 13) << "overlapping " << overlapping << ": the loop's destructor";
    EXPECT_EQ(e.early_releases, 0) << "overlapping " << overlapping;
    EXPECT_EQ(e.unreleased_reuses, 0) << "overlapping " << overlapping;
  }
}

TEST(DecodeLoop, DeviceFailureWithTwoStepsInFlightEmptiesTheLoop) {
  ScriptedEngine e;
  e.overlapping = true;
  DecodeLoop loop(e, kConfig, {4, 16, 4});
  loop.set_follow_rows(1);
  loop.admit({{1, {30, kEos}, beam(4)}, {2, {30, kEos}, beam(4)}});
  loop.step();  // two steps in flight
  e.fail_next_step = true;
  EXPECT_THROW(loop.step(), Error);
  EXPECT_TRUE(loop.idle());
  EXPECT_EQ(loop.active_rows(), 0);
  loop.admit({{3, {2, kEos}, beam(4)}, {4, {2, kEos}, beam(4)}});
  int finished = 0;
  for (int call = 0; !loop.idle() && call < 100; ++call) finished += int(loop.step().finished.size());
  EXPECT_EQ(finished, 2);
}

// The step that would grow the caches past the memory sheds the furthest sentence, which a
// step in flight still holds; the other goes on to its result alone.
TEST(DecodeLoop, OutOfMemoryWithStepsInFlightShedsTheFurthestAndTheOtherGoesOn) {
  ScriptedEngine e;
  e.overlapping = true;
  e.report_cache_positions = false;
  DecodeLoop loop(e, kConfig, {4, 8, 4});
  loop.shed_on_out_of_memory(true);
  loop.admit({{1, {50, kEos}, beam(4)}});
  for (int i = 0; i < 5; ++i) loop.step();  // sentence 1's steps to position 6 submitted
  loop.admit({{2, {3, kEos}, beam(4)}});
  loop.step();
  e.out_of_memory_at_position = 8;
  std::vector<FailedSentence> failed;
  std::map<uint64_t, Translation> finished;
  for (int call = 0; !loop.idle() && call < 100; ++call) {
    StepReport r = loop.step();
    failed.insert(failed.end(), r.failed.begin(), r.failed.end());
    for (auto& f : r.finished) finished[f.id] = std::move(f.translation);
  }
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].id, 1u);
  EXPECT_EQ(failed[0].code, ErrorCode::kResourceExhausted);
  ASSERT_EQ(finished.size(), 1u);
  expect_same(finished.at(2), alone(3, beam(4)), 2);
}

// Repetition controls (SentenceSearch::host_steps()): a loop holding a sentence whose next step
// needs its host state keeps one step in flight and no group follows, until it leaves; then
// the others follow again. Results stay as alone (the scripted engine ignores the edits).
TEST(DecodeLoop, HostStepsSentenceHoldsTheLoopToOneStepInFlight) {
  DecodeOptions controlled = beam(2);
  controlled.repetition_penalty = 1.5f;
  {
    ScriptedEngine e;
    e.overlapping = true;
    const auto r = run(e, {6, 9}, controlled, {16, 64, 4}, 1);
    EXPECT_EQ(e.followed_groups.load(), 0);
    for (int lane : e.lanes()) EXPECT_EQ(lane, 0) << "one step in flight: every submit finds the lanes free";
    EXPECT_EQ(r.size(), 2u);
  }
  {  // admitted together with a sentence without controls: that one follows no step either
     // (a following step would leave the controlled one, in flight, out of it)
    ScriptedEngine e;
    e.overlapping = true;
    DecodeLoop loop(e, kConfig, {4, 16, 4});
    loop.set_follow_rows(1);
    loop.admit({{1, {5, kEos}, beam(2)}, {2, {9, kEos}, controlled}});  // the controlled one lasts
    const std::map<uint64_t, Translation> done = finish_all(loop);
    EXPECT_EQ(e.followed_groups.load(), 0);
    ASSERT_EQ(done.size(), 2u);
    expect_same(done.at(1), alone(5, beam(2)), 1);
    expect_same(done.at(2), alone(9, controlled), 2);
  }
  ScriptedEngine e;
  e.overlapping = true;
  DecodeLoop loop(e, kConfig, {4, 16, 4});
  loop.set_follow_rows(1);
  loop.admit({{1, {30, kEos}, beam(2)}});
  for (int i = 0; i < 4; ++i) loop.step();
  const int before = e.followed_groups.load();
  EXPECT_GT(before, 0) << "no control: the steps follow";
  loop.admit({{2, {3, kEos}, controlled}});
  std::map<uint64_t, Translation> finished;
  int during = -1;
  for (int call = 0; !loop.idle() && call < 200; ++call) {
    for (auto& f : loop.step().finished) {
      if (f.id == 2) during = e.followed_groups.load();
      finished[f.id] = std::move(f.translation);
    }
  }
  ASSERT_EQ(finished.size(), 2u);
  // While sentence 2 stepped, no group followed (at most the step in flight when it was
  // admitted); after it left, sentence 1 followed again.
  EXPECT_LE(during, before + 2);
  EXPECT_GT(e.followed_groups.load(), during);
  expect_same(finished.at(1), alone(30, beam(2)), 1);
  expect_same(finished.at(2), alone(3, controlled), 2);
}

// Repetition controls on an engine that computes them itself (Engine::repetition_on_device(),
// the CUDA engine): a sentence with only no_repeat_ngram_size / repetition_penalty sends them
// in its groups, no host edits, and follows like one without controls; suppress_sequences
// still steps from the host state (one step in flight, no following).
TEST(DecodeLoop, DeviceRepetitionControlsFollowLikePlainSentences) {
  DecodeOptions ngram = beam(2), penalty = beam(1);
  ngram.no_repeat_ngram_size = 3;
  penalty.repetition_penalty = 1.2f;
  for (const DecodeOptions& controlled : {ngram, penalty}) {
    ScriptedEngine e;
    e.overlapping = true;
    e.device_repetition = true;
    const auto r = run(e, {6, 9}, controlled, {16, 64, 4}, 1);
    EXPECT_GT(e.followed_groups.load(), 0) << "the controlled sentences follow";
    EXPECT_GT(e.controlled_groups.load(), 0);
    EXPECT_EQ(e.host_edits.load(), 0) << "the engine computes the edits";
    ASSERT_EQ(r.size(), 2u);
    expect_same(r.at(1).translation, alone(9, controlled), 1);
  }
  DecodeOptions suppress = beam(2);
  suppress.suppress_sequences = {{7, 8}};
  ScriptedEngine e;
  e.overlapping = true;
  e.device_repetition = true;
  const auto r = run(e, {6, 9}, suppress, {16, 64, 4}, 1);
  EXPECT_EQ(e.followed_groups.load(), 0) << "suppress_sequences: the host's edits, one step in flight";
  EXPECT_EQ(e.controlled_groups.load(), 0);
  EXPECT_EQ(r.size(), 2u);
}
