// The step-level scheduler over decode loops with a scripted engine (no model): every
// sentence answered in request order with the result it gets alone, short requests never
// wait for long ones, admission within slots, rows and the encoder token budget, the
// bounded queue, cancellation and deadlines at the next step, engine failures, shutdown; some
// also on engines that step as a device's does (two steps in flight, each following the one
// before). Which sentences a loop admits is admission_policy.h's, tested as tables in
// test_admission_policy.cc; here the threads hand the work over as it decides. No test
// assumes a machine's speed: a loop is stopped inside a step with the engine's gate
// (ScriptedEngine::hold) where a test needs it busy, and waits are for conditions, with a
// deadline (kPatience) no correct run comes near.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <random>
#include <map>

#include "server/scheduling/scheduler.h"
#include "tests/support/scripted_engine.h"

using namespace nmt;
using namespace nmt::server;
using nmt::test::ScriptedEngine;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kPatience(60000);

// Polls `condition` until it holds; false once kPatience has passed.
template <class Condition>
bool eventually(Condition condition) {
  const Clock::time_point until = Clock::now() + kPatience;
  while (!condition()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

constexpr int kEos = ScriptedEngine::kEos;
const ModelConfig kConfig = ScriptedEngine::config();

DecodeOptions beam(int k, int max_length = 255) {
  DecodeOptions o;
  o.beam_size = k;
  o.max_decoding_length = max_length;
  return o;
}

std::vector<int> sentence(int eos_step) { return {eos_step, 1, 2, kEos}; }

// How the fixture's engines step: at once, or as a device's engine does (steps in flight
// across the loop's calls, two from 4 rows on, each following the one before: DecodeLoop).
enum class Stepping { kAtOnce, kOverlapped };

// A loop over its own scripted engine, and the scheduler over `loops` of them.
struct Fixture {
  explicit Fixture(SchedulingOptions o = {}, int loops = 1, milliseconds delay = milliseconds(0),
                   Stepping stepping = Stepping::kAtOnce) {
    for (int i = 0; i < loops; ++i) {
      engines.push_back(std::make_unique<ScriptedEngine>());
      engines.back()->step_delay = delay;
      engines.back()->overlapping = stepping != Stepping::kAtOnce;
      this->loops.push_back(std::make_unique<DecodeLoop>(
          *engines.back(), kConfig, EngineCapacity{o.max_active_sentences, o.max_active_rows, 8}));
      this->loops.back()->set_follow_rows(4);  // the fixture's loops hold few rows
      raw.push_back(this->loops.back().get());
    }
    SchedulerHooks hooks;
    hooks.on_step = [this](int, int rows, int sentences, int admitted, double, double) {
      std::lock_guard<std::mutex> lock(mutex);
      max_rows = std::max(max_rows, rows);
      max_sentences = std::max(max_sentences, sentences);
      max_admitted = std::max(max_admitted, admitted);
    };
    scheduler = std::make_unique<Scheduler>(raw, o, hooks);
  }
  ~Fixture() {
    release();  // a failed test may have left a gate closed: stop() finishes every sentence
    scheduler.reset();
  }
  void hold() {
    for (auto& e : engines) e->hold();
  }
  void release() {
    for (auto& e : engines) e->release();
  }
  bool held(size_t engine) { return engines[engine]->wait_held_step(kPatience); }
  std::future<JobResult> submit(std::vector<std::vector<int>> ids, const DecodeOptions& o,
                                Clock::time_point deadline = Clock::time_point::max(),
                                std::shared_ptr<Job>* job = nullptr) {
    auto promise = std::make_shared<std::promise<JobResult>>();
    auto j = scheduler->submit(std::move(ids), o, deadline,
                               [promise](JobResult r) { promise->set_value(std::move(r)); });
    if (job) *job = j;
    return promise->get_future();
  }
  std::vector<std::unique_ptr<ScriptedEngine>> engines;
  std::vector<std::unique_ptr<DecodeLoop>> loops;
  std::vector<DecodeLoop*> raw;
  std::unique_ptr<Scheduler> scheduler;
  // The largest rows, sentences and admission the loops reported, once they have stopped
  // (a loop reports going idle after its last answer).
  struct Maxima {
    int rows, sentences, admitted;
  };
  Maxima stop_and_read() {
    scheduler->stop();
    std::lock_guard<std::mutex> lock(mutex);
    return {max_rows, max_sentences, max_admitted};
  }
  std::mutex mutex;
  int max_rows = 0, max_sentences = 0, max_admitted = 0;
};

// The sentence's translation alone in a loop of its own.
Translation alone(const std::vector<int>& ids, const DecodeOptions& o) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {1, 16, 8});
  loop.admit({{0, ids, o}});
  while (true) {
    auto done = loop.step().finished;
    if (!done.empty()) return done[0].translation;
  }
}

SchedulingOptions options(int sentences, int rows, int admit_tokens = 2048, int queue = 4096) {
  SchedulingOptions o;
  o.max_active_sentences = sentences;
  o.max_active_rows = rows;
  o.max_admit_tokens = admit_tokens;
  o.max_queue_sentences = queue;
  return o;
}

}  // namespace

namespace {

// 40 requests of mixed options at random times over two loops: each sentence's result is its
// result alone, and the loops stay within their limits.
void expect_mixed_requests_as_alone(Fixture& f) {
  std::mt19937 rng(7);
  std::vector<std::vector<std::vector<int>>> requests;
  std::vector<DecodeOptions> opts;
  std::vector<std::future<JobResult>> futures;
  for (int r = 0; r < 40; ++r) {
    std::vector<std::vector<int>> ids;
    for (int s = 0, n = 1 + int(rng() % 4); s < n; ++s) ids.push_back(sentence(1 + int(rng() % 25)));
    DecodeOptions o = beam(1 + int(rng() % 4), 5 + int(rng() % 30));
    o.num_hypotheses = 1 + int(rng() % o.beam_size);
    o.length_penalty = (rng() % 2) ? 1.0f : 0.6f;
    requests.push_back(ids);
    opts.push_back(o);
    futures.push_back(f.submit(ids, o));
    // Pauses vary the arrivals (no result depends on them).
    if (rng() % 3 == 0) std::this_thread::sleep_for(milliseconds(rng() % 5));
  }
  for (size_t r = 0; r < futures.size(); ++r) {
    const JobResult result = futures[r].get();
    ASSERT_TRUE(result.ok) << result.message;
    ASSERT_EQ(result.translations.size(), requests[r].size());
    for (size_t s = 0; s < requests[r].size(); ++s) {
      const Translation expected = alone(requests[r][s], opts[r]);
      ASSERT_EQ(result.translations[s].hypotheses.size(), expected.hypotheses.size());
      for (size_t h = 0; h < expected.hypotheses.size(); ++h) {
        EXPECT_EQ(result.translations[s].hypotheses[h].ids, expected.hypotheses[h].ids) << r << "/" << s;
        EXPECT_EQ(result.translations[s].hypotheses[h].score, expected.hypotheses[h].score) << r << "/" << s;
      }
    }
  }
  const Fixture::Maxima m = f.stop_and_read();
  EXPECT_LE(m.rows, 16);
  EXPECT_LE(m.sentences, 6);
}

}  // namespace

// On each kind of engine; on a device's, most steps follow the one before.
TEST(Scheduler, ConcurrentMixedRequestsGetTheirAloneResultsInOrder) {
  for (const Stepping stepping : {Stepping::kAtOnce, Stepping::kOverlapped}) {
    Fixture f(options(6, 16), 2, milliseconds(1), stepping);
    expect_mixed_requests_as_alone(f);
    int followed = 0, lane1 = 0;
    for (const auto& e : f.engines) {
      followed += e->followed_groups;
      const std::vector<int> lanes = e->lanes();
      lane1 += int(std::count(lanes.begin(), lanes.end(), 1));
    }
    if (stepping == Stepping::kOverlapped) {
      EXPECT_GT(followed, 20) << "steps followed the one in flight";
      EXPECT_GT(lane1, 10) << "the two steps in flight used both lanes";
    } else {
      EXPECT_EQ(followed, 0);
    }
  }
}

TEST(Scheduler, AShortRequestDoesNotWaitForLongOnes) {
  // Two long sentences (~200 steps) decode; a short one arrives while the loop is held and
  // is let through 12 steps: it is answered within them, the long ones still decoding.
  Fixture f(options(8, 32), 1);
  f.hold();
  auto long_ones = f.submit({sentence(200), sentence(200)}, beam(4));
  ASSERT_TRUE(f.held(0));
  auto short_one = f.submit({sentence(2)}, beam(4));
  f.engines[0]->allow(12);
  ASSERT_EQ(short_one.wait_for(kPatience), std::future_status::ready) << "not answered within 12 steps";
  EXPECT_TRUE(short_one.get().ok);
  EXPECT_EQ(long_ones.wait_for(milliseconds(0)), std::future_status::timeout);
  f.release();
  EXPECT_TRUE(long_ones.get().ok);
}

// A result's decode_steps: the most decoder steps one of its sentences took, each as many
// as alone (the scripted sentence cannot end before the step of its EOS).
TEST(Scheduler, AResultCountsItsLongestSentencesSteps) {
  Fixture f(options(8, 32), 1);
  const JobResult short_alone = f.submit({sentence(3)}, beam(4)).get();
  const JobResult long_alone = f.submit({sentence(9)}, beam(4)).get();
  const JobResult both = f.submit({sentence(9), sentence(3)}, beam(4)).get();
  ASSERT_TRUE(short_alone.ok && long_alone.ok && both.ok);
  EXPECT_GE(short_alone.decode_steps, 3);
  EXPECT_GE(long_alone.decode_steps, 9);
  EXPECT_GT(long_alone.decode_steps, short_alone.decode_steps);
  EXPECT_EQ(both.decode_steps, long_alone.decode_steps);
}

TEST(Scheduler, AdmissionIsBoundedBySlotsRowsAndTokenBudget) {
  // All 12 wait while the loop is held in its first step (the rule's cases:
  // test_admission_policy.cc; here the loop keeps to what it decides).
  Fixture f(options(4, 10, /*admit_tokens=*/8), 1);
  f.hold();
  std::vector<std::future<JobResult>> futures;
  for (int i = 0; i < 12; ++i) futures.push_back(f.submit({sentence(5 + i)}, beam(3)));
  ASSERT_TRUE(f.held(0));
  f.release();
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  const Fixture::Maxima m = f.stop_and_read();
  EXPECT_LE(m.rows, 9);  // three sentences of beam 3 fit in 10 rows, a fourth does not
  EXPECT_EQ(m.sentences, 3);
  EXPECT_LE(m.admitted, 2);  // 4 tokens each, 8 per admission
}

TEST(Scheduler, RefusesAtOnceWhatCanNeverFitOrOverflowsTheQueue) {
  Fixture f(options(2, 4, 2048, /*queue=*/3), 1);
  try {
    f.submit({sentence(3)}, beam(5));
    FAIL() << "beam 5 over 4 rows was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("beam 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.submit({std::vector<int>(9, 3)}, beam(1)), Error);  // over the 8-token slots
  f.hold();
  auto busy = f.submit({sentence(20)}, beam(4));                     // takes every row
  ASSERT_TRUE(f.held(0));                                            // and decodes (held)
  auto queued = f.submit({sentence(2), sentence(2), sentence(2)}, beam(1));
  EXPECT_EQ(f.scheduler->queued_sentences(), 3u);
  try {
    f.submit({sentence(2)}, beam(1));
    FAIL() << "a full queue accepted more";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  f.release();
  EXPECT_TRUE(queued.get().ok);
  EXPECT_TRUE(busy.get().ok);
}

TEST(Scheduler, CancelledSentencesHoldNoPlaceInTheQueue) {
  // The loop is inside a step (held: no purge between steps) when the queue's requests are
  // cancelled; new work takes their places at once instead of being refused.
  Fixture f(options(2, 8, 2048, /*queue=*/4), 1);
  f.hold();
  auto busy = f.submit({sentence(3), sentence(3)}, beam(4));  // takes every slot
  ASSERT_TRUE(f.held(0));
  std::shared_ptr<Job> cancelled_job;
  auto cancelled = f.submit({sentence(2), sentence(2), sentence(2), sentence(2)}, beam(1),
                            Clock::time_point::max(), &cancelled_job);
  f.scheduler->cancel(cancelled_job);
  EXPECT_EQ(cancelled.get().code, ErrorCode::kCancelled);
  std::future<JobResult> next;
  ASSERT_NO_THROW(next = f.submit({sentence(2), sentence(2), sentence(2)}, beam(1)));
  EXPECT_EQ(f.scheduler->queued_sentences(), 3u);
  f.release();
  EXPECT_TRUE(next.get().ok);
  EXPECT_TRUE(busy.get().ok);
}

namespace {

// A cancelled and an expiring sentence leave their loop mid-decode; the kept one finishes.
// The cancel comes while the loop is held inside a step; the expiring one's deadline (60 ms)
// passes within 30 of the engine's 2 ms steps, and the kept one ends near its step 30.
void expect_cancelled_and_expired_leave(Fixture& f) {
  std::shared_ptr<Job> cancelled_job;
  auto cancelled = f.submit({sentence(500)}, beam(4), Clock::time_point::max(), &cancelled_job);
  auto expiring = f.submit({sentence(500)}, beam(4), Clock::now() + milliseconds(60));
  auto kept = f.submit({sentence(30)}, beam(4));
  ASSERT_TRUE(eventually([&] { return f.scheduler->active_sentences() == 3; }));
  f.hold();
  ASSERT_TRUE(f.held(0));
  const size_t held_at = f.engines[0]->steps().size();  // the held step is the next
  f.scheduler->cancel(cancelled_job);
  ASSERT_EQ(cancelled.wait_for(milliseconds(0)), std::future_status::ready) << "answered by cancel() itself";
  EXPECT_EQ(cancelled.get().code, ErrorCode::kCancelled);
  f.release();
  const JobResult e = expiring.get();
  EXPECT_EQ(e.code, ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(kept.get().ok);
  ASSERT_TRUE(eventually([&] { return f.scheduler->active_sentences() == 0; }));
  const std::vector<size_t> rows = f.engines[0]->steps();
  // From the step after the held one (and the one in flight beside it) on: the cancelled
  // sentence's rows are gone (the other two hold at most 8).
  for (size_t i = held_at + 2; i < rows.size(); ++i) EXPECT_LE(rows[i], 8u) << "step " << i;
  // Nobody decoded on to its length limit (255): the expiring one left at its deadline.
  EXPECT_LT(rows.size(), std::max<size_t>(held_at, 40) + 10);
}

}  // namespace

TEST(Scheduler, CancelledAndExpiredSentencesLeaveAtTheNextStep) {
  for (const Stepping stepping : {Stepping::kAtOnce, Stepping::kOverlapped}) {
    Fixture f(options(8, 32), 1, milliseconds(2), stepping);
    expect_cancelled_and_expired_leave(f);
  }
}

TEST(Scheduler, ExpiredWorkNeverEntersALoop) {
  // The only slot is busy (held inside a step) until the newcomer's deadline has passed.
  Fixture f(options(1, 4), 1);
  f.hold();
  auto busy = f.submit({sentence(5)}, beam(4));
  ASSERT_TRUE(f.held(0));
  const Clock::time_point deadline = Clock::now() + milliseconds(20);
  auto expiring = f.submit({sentence(3)}, beam(1), deadline);
  std::this_thread::sleep_until(deadline);  // the deadline is what is tested
  f.release();
  EXPECT_EQ(expiring.get().code, ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(busy.get().ok);
  EXPECT_EQ(f.engines[0]->encoded, 1) << "the expired sentence was encoded";
}

TEST(Scheduler, EngineFailureFailsTheActiveSentencesAndServingGoesOn) {
  for (const Stepping stepping : {Stepping::kAtOnce, Stepping::kOverlapped}) {
    Fixture f(options(8, 32), 1, milliseconds(0), stepping);
    f.hold();
    auto a = f.submit({sentence(50), sentence(50)}, beam(4));
    ASSERT_TRUE(f.held(0));  // they decode, 50 steps from their end
    f.engines[0]->fail_next_step = true;
    f.release();
    const JobResult r = a.get();
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.code, ErrorCode::kResourceExhausted);
    EXPECT_NE(r.message.find("scripted out of memory"), std::string::npos);
    EXPECT_TRUE(f.submit({sentence(3)}, beam(4)).get().ok);
  }
}

TEST(Scheduler, OutOfMemoryFailsOnlyTheSentencesThatNeededTheGrowth) {
  Fixture f(options(8, 32), 1);
  ScriptedEngine& engine = *f.engines[0];
  f.hold();
  auto long_one = f.submit({sentence(200)}, beam(2));
  ASSERT_TRUE(f.held(0));
  engine.allow(20);
  ASSERT_TRUE(f.held(0));  // the long one is 20 steps in, held in the next
  ASSERT_EQ(engine.steps().size(), 20u);
  auto short_a = f.submit({sentence(12)}, beam(1));
  auto short_b = f.submit({sentence(12)}, beam(1));
  // Both short ones join at the next step (2 + 1 + 1 rows); the long one (at about the step
  // count's position, 20 steps ahead of them) runs out of memory a few steps on; the short
  // ones end before they reach that position.
  engine.out_of_memory_at_position = int(engine.steps().size()) + 4;
  f.release();
  const JobResult failed = long_one.get();
  EXPECT_EQ(failed.code, ErrorCode::kResourceExhausted);
  EXPECT_NE(failed.message.find("out of memory growing the caches"), std::string::npos) << failed.message;
  for (auto* r : {&short_a, &short_b}) {
    const JobResult ok = r->get();
    ASSERT_TRUE(ok.ok) << ok.message;
    EXPECT_EQ(ok.translations[0].hypotheses[0].ids, alone(sentence(12), beam(1)).hypotheses[0].ids);
  }
  engine.out_of_memory_at_position = -1;
  EXPECT_TRUE(f.submit({sentence(3)}, beam(4)).get().ok) << "the loop goes on serving";
}

TEST(Scheduler, StopFinishesQueuedAndActiveWorkThenRefuses) {
  Fixture f(options(1, 4), 1, milliseconds(1));
  auto first = f.submit({sentence(20)}, beam(4));
  auto second = f.submit({sentence(5)}, beam(4));
  f.scheduler->stop();
  EXPECT_TRUE(first.get().ok);
  EXPECT_TRUE(second.get().ok);
  try {
    f.submit({sentence(2)}, beam(1));
    FAIL() << "accepted after stop";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  }
}

TEST(Scheduler, SeveralLoopsShareTheQueue) {
  // One loop holds two; while it is held inside its step the other must take work.
  Fixture f(options(2, 8), 2);
  f.hold();
  std::vector<std::future<JobResult>> futures;
  for (int i = 0; i < 8; ++i) futures.push_back(f.submit({sentence(20)}, beam(4)));
  EXPECT_TRUE(f.held(0));
  EXPECT_TRUE(f.held(1));
  f.release();
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  EXPECT_GT(f.engines[0]->encoded, 0);
  EXPECT_GT(f.engines[1]->encoded, 0);
}

TEST(Scheduler, LoneRequestsQueuedWhileALoopPollsReachTheOtherLoop) {
  // Lone requests submitted while a loop polls wake nobody: they are the poller's. Here they
  // arrive from the answer's callback, while the loop that answered counts as polling; it
  // takes its two slots' worth, and the six it cannot take must wake the sleeping loop, not
  // wait for the busy one's steps (held here until the other loop has taken some).
  Fixture f(options(2, 8), 2);
  std::vector<std::future<JobResult>> burst;
  std::promise<void> submitted;
  f.scheduler->submit({sentence(3)}, beam(1), Clock::time_point::max(), [&](JobResult r) {
    EXPECT_TRUE(r.ok) << r.message;
    f.hold();
    for (int i = 0; i < 8; ++i) burst.push_back(f.submit({sentence(20)}, beam(4)));
    submitted.set_value();
  });
  submitted.get_future().wait();
  EXPECT_TRUE(f.held(0));
  EXPECT_TRUE(f.held(1));
  f.release();
  for (auto& fu : burst) EXPECT_TRUE(fu.get().ok);
  f.scheduler->stop();
  EXPECT_GT(std::min(f.engines[0]->encoded.load(), f.engines[1]->encoded.load()), 1)
      << "encodes: " << f.engines[0]->encoded << " and " << f.engines[1]->encoded;
}

TEST(Scheduler, SeveralLoopsTakeEvenSharesOfARequestBeyondTheFill) {
  // Each loop could hold all 16 sentences; past loop_fill_sentences (8, and 0 = always) the
  // first loop takes its share and the other the rest (while the first is held).
  for (int fill : {0, 8}) {
    SchedulingOptions o = options(16, 64);
    o.loop_fill_sentences = fill;
    Fixture f(o, 2);
    f.hold();
    std::vector<std::vector<int>> ids(16, sentence(20));
    auto all = f.submit(ids, beam(2));
    EXPECT_TRUE(f.held(0)) << "fill " << fill;
    EXPECT_TRUE(f.held(1)) << "fill " << fill;
    f.release();
    EXPECT_TRUE(all.get().ok);
    EXPECT_EQ(f.stop_and_read().sentences, 8) << "fill " << fill;
    EXPECT_GT(f.engines[0]->encoded, 0) << "fill " << fill;
    EXPECT_GT(f.engines[1]->encoded, 0) << "fill " << fill;
  }
}

TEST(Scheduler, UpToTheFillOneLoopDecodesEverySentence) {
  // 16 sentences of a model with loop_fill_sentences 16: one loop takes the first request,
  // and the requests that come while it decodes join it (the idle loop leaves them to it),
  // because on a GPU two half-full loops cost two steps where one full loop costs one.
  // Here they come while the decoding loop is held inside a step.
  SchedulingOptions o = options(16, 64);
  o.loop_fill_sentences = 16;
  Fixture f(o, 2);
  f.hold();
  std::vector<std::future<JobResult>> futures;
  futures.push_back(f.submit(std::vector<std::vector<int>>(4, sentence(60)), beam(2)));
  ASSERT_TRUE(eventually([&] {
    return f.engines[0]->wait_held_step(milliseconds(0)) || f.engines[1]->wait_held_step(milliseconds(0));
  }));
  for (int i = 0; i < 12; ++i) futures.push_back(f.submit({sentence(20 + i)}, beam(2)));
  f.release();
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  const auto maxima = f.stop_and_read();
  EXPECT_EQ(std::min(f.engines[0]->encoded.load(), f.engines[1]->encoded.load()), 0)
      << "encodes: " << f.engines[0]->encoded << " and " << f.engines[1]->encoded;
  EXPECT_GT(maxima.sentences, 4);
}

TEST(Scheduler, AnEmptierDecodingLoopLeavesNewcomersToAFullerOne) {
  // Two loops of 8 slots below a fill of 16: a request of 12 sentences splits 8 and 4. Once
  // the short ones have left, one loop decodes 6 sentences and the other 2: newcomers that the
  // fuller loop has room for go to it (the emptier one drains), so that the model's sentences
  // come back to one loop's steps rather than staying split over two.
  // Each loop is let through 8 steps (the short ones end in 3) and then held while the
  // newcomers arrive.
  SchedulingOptions o = options(8, 64);
  o.loop_fill_sentences = 16;
  Fixture f(o, 2);
  f.hold();
  std::vector<std::vector<int>> first;
  for (int i = 0; i < 12; ++i) first.push_back(sentence(i % 8 < 2 ? 3 : 200));  // 2 short of each loop's
  std::vector<std::future<JobResult>> futures;
  futures.push_back(f.submit(first, beam(1)));
  ASSERT_TRUE(f.held(0));
  ASSERT_TRUE(f.held(1));
  for (auto& e : f.engines) e->allow(8);
  ASSERT_TRUE(f.held(0));
  ASSERT_TRUE(f.held(1));
  ASSERT_EQ(f.scheduler->active_sentences(), 8) << "the short ones have left";
  const int encoded[2] = {f.engines[0]->encoded.load(), f.engines[1]->encoded.load()};
  ASSERT_EQ(encoded[0] + encoded[1], 12);
  ASSERT_EQ(std::min(encoded[0], encoded[1]), 4) << "the first request did not split 8 and 4";
  const int emptier = encoded[0] < encoded[1] ? 0 : 1;
  for (int i = 0; i < 2; ++i) futures.push_back(f.submit({sentence(10)}, beam(1)));
  f.release();
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  f.scheduler->stop();
  EXPECT_EQ(f.engines[size_t(emptier)]->encoded.load(), encoded[emptier]) << "the emptier loop took newcomers";
  EXPECT_EQ(f.engines[size_t(1 - emptier)]->encoded.load(), encoded[1 - emptier] + 2);
}

TEST(Scheduler, OneClientsLoneRequestsStayOnOneLoop) {
  // A closed loop of one client: each request is sent as soon as the previous one is
  // answered, while the loop that answered is still in the answer's callback (which returns
  // only once the next request is in, as a slow response path would). That loop takes the
  // next request when it is done; waking the other loop for it would move the client to a
  // cold engine every time.
  Fixture f(options(4, 16), 2, milliseconds(1));
  std::vector<int> served_by;  // the engine that encoded each request
  std::shared_ptr<std::promise<void>> next_sent;
  for (int i = 0; i < 20; ++i) {
    const int before[2] = {f.engines[0]->encoded.load(), f.engines[1]->encoded.load()};
    auto answered = std::make_shared<std::promise<JobResult>>();
    auto sent = std::make_shared<std::promise<void>>();
    f.scheduler->submit({sentence(3)}, beam(1), Clock::time_point::max(), [answered, sent](JobResult r) {
      answered->set_value(std::move(r));
      sent->get_future().wait();
    });
    if (next_sent) next_sent->set_value();  // the previous callback returns now
    next_sent = sent;
    const JobResult r = answered->get_future().get();
    ASSERT_TRUE(r.ok) << r.message;
    served_by.push_back(f.engines[0]->encoded.load() > before[0] ? 0 : 1);
    EXPECT_EQ(f.engines[0]->encoded.load() + f.engines[1]->encoded.load(), before[0] + before[1] + 1);
  }
  next_sent->set_value();
  f.scheduler->stop();
  // A loop thread that starts late (after the client's first answer: seen on a loaded 2-core
  // machine) takes what is queued at its first look, as at any server's start: one move at
  // most.
  int moves = 0;
  for (size_t i = 1; i < served_by.size(); ++i) moves += served_by[i] != served_by[i - 1];
  EXPECT_LE(moves, 1) << "the client's requests moved between the loops " << moves << " times";
}

TEST(Scheduler, LoneRequestsAfterAnyPauseAreAllServed) {
  // Lone sentences arrive while the last loop polls, just after it gave up polling, and
  // long after: the wake-up is skipped only while a loop polls, so none may wait forever.
  // (The pauses, around the loop's 2 ms of polling, are the test's input, not a wait.)
  Fixture f(options(4, 16), 2);
  std::mt19937 random(7);
  for (int i = 0; i < 150; ++i) {
    const JobResult r = f.submit({sentence(2)}, beam(1)).get();
    ASSERT_TRUE(r.ok) << r.message;
    std::this_thread::sleep_for(microseconds(random() % 4000));
  }
}

TEST(Scheduler, ABusyLoopAdmitsOnceNewcomersAreWorthAnEncode) {
  // 8 sentences decode; a lone newcomer (under a quarter of them) waits until
  // max_admit_delay_steps steps have passed since their admission, a pair (a quarter) is
  // admitted at the next step. The steps are counted, and the loop is held inside a step
  // while the newcomers arrive (the rule itself: test_admission_policy.cc).
  SchedulingOptions o = options(16, 64);
  o.max_admit_delay_steps = 30;
  auto engine = std::make_unique<ScriptedEngine>();
  DecodeLoop loop(*engine, kConfig, {o.max_active_sentences, o.max_active_rows, 8});
  std::mutex mutex;
  std::vector<int> encoded_at;  // step numbers of the steps that encoded newcomers
  int steps = 0, encoded = 0;
  SchedulerHooks hooks;
  hooks.on_step = [&](int, int, int sentences, int admitted, double, double) {
    std::lock_guard<std::mutex> lock(mutex);
    if (sentences == 0) return;  // the loop went idle
    ++steps;
    encoded += admitted;
    if (admitted > 0) encoded_at.push_back(steps);
  };
  Scheduler scheduler({&loop}, o, hooks);
  auto submit = [&](int eos_step) {
    auto p = std::make_shared<std::promise<JobResult>>();
    scheduler.submit({sentence(eos_step)}, beam(1), Clock::time_point::max(),
                     [p](JobResult r) { p->set_value(std::move(r)); });
    return p->get_future();
  };
  auto read = [&](auto what) {
    std::lock_guard<std::mutex> lock(mutex);
    return what();
  };
  // The first encode step after step `after`.
  auto encode_after = [&](int after) {
    return read([&] {
      for (int s : encoded_at) {
        if (s > after) return s;
      }
      return -1;
    });
  };
  // The 8 arrive while the loop is held in its first step: admitted in at most two rounds,
  // encoded by step 2.
  engine->hold();
  std::vector<std::future<JobResult>> busy;
  for (int i = 0; i < 8; ++i) busy.push_back(submit(150));
  ASSERT_TRUE(engine->wait_held_step(kPatience));
  engine->allow(3);
  ASSERT_TRUE(engine->wait_held_step(kPatience));
  ASSERT_EQ(read([&] { return encoded; }), 8);
  const int admitted_at = read([&] { return encoded_at.back(); });  // the 8's last admission
  const int lone_at = read([&] { return steps; });
  auto lone = submit(3);
  engine->allow(40);  // the delay (30) and the lone one's few steps
  ASSERT_TRUE(engine->wait_held_step(kPatience));
  ASSERT_EQ(lone.wait_for(kPatience), std::future_status::ready) << "not answered within the steps";
  EXPECT_TRUE(lone.get().ok);
  const int lone_encoded = encode_after(lone_at);
  EXPECT_GE(lone_encoded - admitted_at, 30) << "a lone newcomer was admitted before the delay";
  EXPECT_LE(lone_encoded, admitted_at + 30) << "it waited past the delay";

  const int pair_at = read([&] { return steps; });
  auto a = submit(3), b = submit(3);
  engine->release();
  EXPECT_TRUE(a.get().ok);
  EXPECT_TRUE(b.get().ok);
  EXPECT_LE(encode_after(pair_at) - pair_at, 2) << "two newcomers (a quarter of 8) waited";
  for (auto& f : busy) EXPECT_TRUE(f.get().ok);
}
