// The step-level scheduler over decode loops with a scripted engine (no model): every
// sentence answered in request order with the result it gets alone, short requests never
// wait for long ones, admission within slots, rows and the encoder token budget, the
// bounded queue, cancellation and deadlines at the next step, engine failures, shutdown; some
// also on engines that step as a device's does (two steps in flight, each following the one
// before).
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
  Fixture f(options(8, 32), 1, milliseconds(2));
  auto long1 = f.submit({sentence(200)}, beam(4));
  auto long2 = f.submit({sentence(200)}, beam(4));
  std::this_thread::sleep_for(milliseconds(20));
  const auto start = Clock::now();
  const JobResult s = f.submit({sentence(2)}, beam(4)).get();
  const double short_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  ASSERT_TRUE(s.ok);
  // The long ones need ~200 steps of 2 ms; the short one a few steps.
  EXPECT_EQ(long1.wait_for(milliseconds(0)), std::future_status::timeout);
  EXPECT_LT(short_ms, 100.0);
  EXPECT_TRUE(long1.get().ok);
  EXPECT_TRUE(long2.get().ok);
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
  Fixture f(options(4, 10, /*admit_tokens=*/8), 1, milliseconds(1));
  std::vector<std::future<JobResult>> futures;
  for (int i = 0; i < 12; ++i) futures.push_back(f.submit({sentence(5 + i)}, beam(3)));
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  const Fixture::Maxima m = f.stop_and_read();
  EXPECT_LE(m.rows, 9);  // three sentences of beam 3 fit in 10 rows, a fourth does not
  EXPECT_EQ(m.sentences, 3);
  EXPECT_LE(m.admitted, 2);  // 4 tokens each, 8 per admission
}

TEST(Scheduler, RefusesAtOnceWhatCanNeverFitOrOverflowsTheQueue) {
  Fixture f(options(2, 4, 2048, /*queue=*/3), 1, milliseconds(5));
  try {
    f.submit({sentence(3)}, beam(5));
    FAIL() << "beam 5 over 4 rows was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("beam 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.submit({std::vector<int>(9, 3)}, beam(1)), Error);  // over the 8-token slots
  auto busy = f.submit({sentence(100)}, beam(4));                    // takes every row
  std::this_thread::sleep_for(milliseconds(30));
  auto queued = f.submit({sentence(2), sentence(2), sentence(2)}, beam(1));
  EXPECT_EQ(f.scheduler->queued_sentences(), 3u);
  try {
    f.submit({sentence(2)}, beam(1));
    FAIL() << "a full queue accepted more";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  EXPECT_TRUE(queued.get().ok);
  EXPECT_TRUE(busy.get().ok);
}

TEST(Scheduler, CancelledSentencesHoldNoPlaceInTheQueue) {
  // The loop is inside a long step (no purge between steps for a while) when the queue's
  // requests are cancelled; new work takes their places at once instead of being refused.
  Fixture f(options(2, 8, 2048, /*queue=*/4), 1, milliseconds(300));
  auto busy = f.submit({sentence(3), sentence(3)}, beam(4));  // takes every slot
  while (f.engines[0]->encoded.load() < 2) std::this_thread::sleep_for(milliseconds(1));
  std::shared_ptr<Job> cancelled_job;
  auto cancelled = f.submit({sentence(2), sentence(2), sentence(2), sentence(2)}, beam(1),
                            Clock::time_point::max(), &cancelled_job);
  f.scheduler->cancel(cancelled_job);
  EXPECT_EQ(cancelled.get().code, ErrorCode::kCancelled);
  std::future<JobResult> next;
  ASSERT_NO_THROW(next = f.submit({sentence(2), sentence(2), sentence(2)}, beam(1)));
  EXPECT_EQ(f.scheduler->queued_sentences(), 3u);
  EXPECT_TRUE(next.get().ok);
  EXPECT_TRUE(busy.get().ok);
}

namespace {

// A cancelled and an expiring sentence leave their loop mid-decode; the kept one finishes.
void expect_cancelled_and_expired_leave(Fixture& f) {
  std::shared_ptr<Job> cancelled_job;
  auto cancelled = f.submit({sentence(500)}, beam(4), Clock::time_point::max(), &cancelled_job);
  auto expiring = f.submit({sentence(500)}, beam(4), Clock::now() + milliseconds(60));
  auto kept = f.submit({sentence(30)}, beam(4));
  std::this_thread::sleep_for(milliseconds(30));
  const auto cancel_at = Clock::now();
  f.scheduler->cancel(cancelled_job);
  const JobResult c = cancelled.get();
  EXPECT_EQ(c.code, ErrorCode::kCancelled);
  EXPECT_LT(Clock::now() - cancel_at, milliseconds(50));
  const JobResult e = expiring.get();
  EXPECT_EQ(e.code, ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(kept.get().ok);
  // The loop went on with the kept sentence alone: its rows only.
  for (int i = 0; i < 100 && f.scheduler->active_sentences() > 0; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(f.scheduler->active_sentences(), 0);
  EXPECT_LT(f.engines[0]->steps().size(), 200u);  // nobody decoded to 500
}

}  // namespace

TEST(Scheduler, CancelledAndExpiredSentencesLeaveAtTheNextStep) {
  for (const Stepping stepping : {Stepping::kAtOnce, Stepping::kOverlapped}) {
    Fixture f(options(8, 32), 1, milliseconds(2), stepping);
    expect_cancelled_and_expired_leave(f);
  }
}

TEST(Scheduler, ExpiredWorkNeverEntersALoop) {
  Fixture f(options(1, 4), 1, milliseconds(2));
  auto busy = f.submit({sentence(40)}, beam(4));
  std::this_thread::sleep_for(milliseconds(10));
  const int encoded = f.engines[0]->encoded;
  const JobResult r = f.submit({sentence(3)}, beam(1), Clock::now() + milliseconds(20)).get();
  EXPECT_EQ(r.code, ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(busy.get().ok);
  EXPECT_EQ(f.engines[0]->encoded, encoded);
}

TEST(Scheduler, EngineFailureFailsTheActiveSentencesAndServingGoesOn) {
  for (const Stepping stepping : {Stepping::kAtOnce, Stepping::kOverlapped}) {
    Fixture f(options(8, 32), 1, milliseconds(2), stepping);
    auto a = f.submit({sentence(50), sentence(50)}, beam(4));
    std::this_thread::sleep_for(milliseconds(20));
    f.engines[0]->fail_next_step = true;
    const JobResult r = a.get();
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.code, ErrorCode::kResourceExhausted);
    EXPECT_NE(r.message.find("scripted out of memory"), std::string::npos);
    EXPECT_TRUE(f.submit({sentence(3)}, beam(4)).get().ok);
  }
}

TEST(Scheduler, OutOfMemoryFailsOnlyTheSentencesThatNeededTheGrowth) {
  Fixture f(options(8, 32), 1, milliseconds(2));
  ScriptedEngine& engine = *f.engines[0];
  auto long_one = f.submit({sentence(200)}, beam(2));
  while (engine.steps().size() < 20) std::this_thread::sleep_for(milliseconds(1));
  auto short_a = f.submit({sentence(12)}, beam(1));
  auto short_b = f.submit({sentence(12)}, beam(1));
  // Once both short ones decode beside it (2 + 1 + 1 rows), the long one (at about the step
  // count's position, 20 steps ahead of them) runs out of memory a few steps on; the short
  // ones end before they reach that position.
  while (engine.steps().empty() || engine.steps().back() != 4) std::this_thread::sleep_for(milliseconds(1));
  engine.out_of_memory_at_position = int(engine.steps().size()) + 3;
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
  Fixture f(options(2, 8), 2, milliseconds(2));
  std::vector<std::future<JobResult>> futures;
  for (int i = 0; i < 8; ++i) futures.push_back(f.submit({sentence(20)}, beam(4)));
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  EXPECT_GT(f.engines[0]->encoded, 0);
  EXPECT_GT(f.engines[1]->encoded, 0);
}

TEST(Scheduler, LoneRequestsQueuedWhileALoopPollsReachTheOtherLoop) {
  // Lone requests submitted while a loop polls wake nobody: they are the poller's. Here they
  // arrive from the answer's callback, while the loop that answered counts as polling; it
  // takes its two slots' worth, and the six it cannot take must wake the sleeping loop, not
  // wait for the busy one's steps.
  Fixture f(options(2, 8), 2, milliseconds(2));
  std::vector<std::future<JobResult>> burst;
  std::promise<void> submitted;
  f.scheduler->submit({sentence(3)}, beam(1), Clock::time_point::max(), [&](JobResult r) {
    EXPECT_TRUE(r.ok) << r.message;
    for (int i = 0; i < 8; ++i) burst.push_back(f.submit({sentence(20)}, beam(4)));
    submitted.set_value();
  });
  submitted.get_future().wait();
  for (auto& fu : burst) EXPECT_TRUE(fu.get().ok);
  f.scheduler->stop();
  EXPECT_GT(std::min(f.engines[0]->encoded.load(), f.engines[1]->encoded.load()), 1)
      << "encodes: " << f.engines[0]->encoded << " and " << f.engines[1]->encoded;
}

TEST(Scheduler, SeveralLoopsTakeEvenSharesOfARequestBeyondTheFill) {
  // Each loop could hold all 16 sentences; past loop_fill_sentences (8, and 0 = always) the
  // even share keeps the loops' steps alike.
  for (int fill : {0, 8}) {
    SchedulingOptions o = options(16, 64);
    o.loop_fill_sentences = fill;
    Fixture f(o, 2, milliseconds(2));
    std::vector<std::vector<int>> ids(16, sentence(20));
    EXPECT_TRUE(f.submit(ids, beam(2)).get().ok);
    EXPECT_EQ(f.stop_and_read().sentences, 8) << "fill " << fill;
    EXPECT_GT(f.engines[0]->encoded, 0) << "fill " << fill;
    EXPECT_GT(f.engines[1]->encoded, 0) << "fill " << fill;
  }
}

TEST(Scheduler, UpToTheFillOneLoopDecodesEverySentence) {
  // 16 sentences of a model with loop_fill_sentences 16: one loop takes the first request,
  // and the requests that come while it decodes join it (the idle loop leaves them to it),
  // because on a GPU two half-full loops cost two steps where one full loop costs one.
  SchedulingOptions o = options(16, 64);
  o.loop_fill_sentences = 16;
  Fixture f(o, 2, milliseconds(1));
  std::vector<std::future<JobResult>> futures;
  futures.push_back(f.submit(std::vector<std::vector<int>>(4, sentence(60)), beam(2)));
  for (int i = 0; i < 12; ++i) {
    std::this_thread::sleep_for(milliseconds(2));
    futures.push_back(f.submit({sentence(20 + i)}, beam(2)));
  }
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
  SchedulingOptions o = options(8, 64);
  o.loop_fill_sentences = 16;
  Fixture f(o, 2, milliseconds(1));
  std::vector<std::vector<int>> first;
  for (int i = 0; i < 12; ++i) first.push_back(sentence(i % 8 < 2 ? 3 : 200));  // 2 short of each loop's
  std::vector<std::future<JobResult>> futures;
  futures.push_back(f.submit(first, beam(1)));
  std::this_thread::sleep_for(milliseconds(30));
  const int encoded[2] = {f.engines[0]->encoded.load(), f.engines[1]->encoded.load()};
  ASSERT_EQ(encoded[0] + encoded[1], 12);
  ASSERT_EQ(std::min(encoded[0], encoded[1]), 4) << "the first request did not split 8 and 4";
  const int emptier = encoded[0] < encoded[1] ? 0 : 1;
  for (int i = 0; i < 2; ++i) {
    std::this_thread::sleep_for(milliseconds(2));
    futures.push_back(f.submit({sentence(10)}, beam(1)));
  }
  for (auto& fu : futures) EXPECT_TRUE(fu.get().ok);
  f.scheduler->stop();
  EXPECT_EQ(f.engines[size_t(emptier)]->encoded.load(), encoded[emptier]) << "the emptier loop took newcomers";
  EXPECT_EQ(f.engines[size_t(1 - emptier)]->encoded.load(), encoded[1 - emptier] + 2);
}

TEST(Scheduler, OneClientsLoneRequestsStayOnOneLoop) {
  // A closed loop of one client: each request is sent as soon as the previous one is
  // answered, while the loop that answered is still in the answer's callback (held here for
  // 3 ms, as a slow response path would). That loop takes the next request when it is done;
  // waking the other loop for it would move the client to a cold engine every time.
  Fixture f(options(4, 16), 2, milliseconds(1));
  // The policy is the running scheduler's: a loop thread that starts only after the client's
  // first answer (seen on a loaded 2-core machine, ~2% of runs) takes whatever is queued at
  // its first look, as at any server's start. Both loops are up and idle after this.
  std::this_thread::sleep_for(milliseconds(50));
  for (int i = 0; i < 20; ++i) {
    auto answered = std::make_shared<std::promise<JobResult>>();
    f.scheduler->submit({sentence(3)}, beam(1), Clock::time_point::max(), [answered](JobResult r) {
      answered->set_value(std::move(r));
      std::this_thread::sleep_for(milliseconds(3));
    });
    const JobResult r = answered->get_future().get();
    ASSERT_TRUE(r.ok) << r.message;
  }
  f.scheduler->stop();
  EXPECT_EQ(std::min(f.engines[0]->encoded.load(), f.engines[1]->encoded.load()), 0)
      << "encodes: " << f.engines[0]->encoded << " and " << f.engines[1]->encoded;
  EXPECT_EQ(f.engines[0]->encoded.load() + f.engines[1]->encoded.load(), 20);
}

TEST(Scheduler, LoneRequestsAfterAnyPauseAreAllServed) {
  // Lone sentences arrive while the last loop polls, just after it gave up polling, and
  // long after: the wake-up is skipped only while a loop polls, so none may wait forever.
  Fixture f(options(4, 16), 2);
  std::mt19937 random(7);
  for (int i = 0; i < 150; ++i) {
    const JobResult r = f.submit({sentence(2)}, beam(1)).get();
    ASSERT_TRUE(r.ok) << r.message;
    std::this_thread::sleep_for(microseconds(random() % 4000));
  }
}

TEST(Scheduler, ABusyLoopAdmitsOnceNewcomersAreWorthAnEncode) {
  // 8 sentences decode; a lone newcomer (under a quarter of them) waits for
  // max_admit_delay_steps steps, two more newcomers make it worth an encode at once.
  SchedulingOptions o = options(16, 64);
  o.max_admit_delay_steps = 30;
  auto engine = std::make_unique<ScriptedEngine>();
  engine->step_delay = milliseconds(1);
  DecodeLoop loop(*engine, kConfig, {o.max_active_sentences, o.max_active_rows, 8});
  std::mutex mutex;
  std::vector<int> encoded_at;  // step numbers of the steps that encoded newcomers
  std::atomic<int> steps{0};
  SchedulerHooks hooks;
  hooks.on_step = [&](int, int, int, int encoded, double, double) {
    const int n = ++steps;
    std::lock_guard<std::mutex> lock(mutex);
    if (encoded > 0) encoded_at.push_back(n);
  };
  Scheduler scheduler({&loop}, o, hooks);
  auto submit = [&](int eos_step) {
    auto p = std::make_shared<std::promise<JobResult>>();
    scheduler.submit({sentence(eos_step)}, beam(1), Clock::time_point::max(),
                     [p](JobResult r) { p->set_value(std::move(r)); });
    return p->get_future();
  };
  std::vector<std::future<JobResult>> busy;
  for (int i = 0; i < 8; ++i) busy.push_back(submit(150));
  // All 8 admitted and their encodes behind: a thread descheduled between its submits (a
  // busy CI machine) had the loop step on without the last few, which were then encoded
  // after lone_at and counted as the lone newcomer's encode.
  while (scheduler.active_sentences() < 8) std::this_thread::sleep_for(milliseconds(1));
  const int all_admitted_at = steps;
  while (steps < std::max(5, all_admitted_at + 3)) std::this_thread::sleep_for(milliseconds(1));
  const int lone_at = steps;
  auto lone = submit(3);
  EXPECT_TRUE(lone.get().ok);
  int lone_encoded = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (int s : encoded_at) if (s > lone_at) { lone_encoded = s; break; }
  }
  EXPECT_GE(lone_encoded - lone_at, 25) << "a lone newcomer was admitted before the delay";
  const int pair_at = steps;
  auto a = submit(3), b = submit(3);
  EXPECT_TRUE(a.get().ok);
  EXPECT_TRUE(b.get().ok);
  int pair_encoded = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (int s : encoded_at) if (s > pair_at) { pair_encoded = s; break; }
  }
  EXPECT_LE(pair_encoded - pair_at, 5) << "two newcomers (a quarter of 8) waited";
  for (auto& f : busy) EXPECT_TRUE(f.get().ok);
}
