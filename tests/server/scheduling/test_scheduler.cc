// The step-level scheduler over one decode loop (and two, for mixed requests) with a scripted
// engine: every sentence answered in request order with the result it gets alone, short
// requests never wait for long ones, admission within slots, rows and the encoder token
// budget, the bounded queue, cancellation and deadlines at the next step, engine failures,
// shutdown, the admission delay; some also on engines that step as a device's does (two steps
// in flight, each following the one before). How: scheduler_fixture.h.
#include <random>

#include "tests/server/scheduling/scheduler_fixture.h"

using namespace scheduler_test;

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

// Fair queueing (fair_queue.h) in the scheduler: a tenant over its share is refused while
// another is still taken, and the other's sentence leaves the queue before the backlog.
TEST(Scheduler, TenantsShareTheQueueFairly) {
  SchedulingOptions o = options(1, 4, 2048, /*queue=*/8);
  o.tenant_queue_share = 0.5;  // 4 sentences a tenant
  Fixture f(o, 1);
  f.hold();
  auto busy = f.submit({sentence(3)}, beam(4), Clock::time_point::max(), nullptr, {"hog"});  // the one slot
  ASSERT_TRUE(f.held(0));
  auto backlog = f.submit({sentence(2), sentence(2), sentence(2), sentence(2)}, beam(1), Clock::time_point::max(),
                          nullptr, {"hog"});
  try {
    f.submit({sentence(2)}, beam(1), Clock::time_point::max(), nullptr, {"hog"});
    FAIL() << "the hog's fifth waiting sentence was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("batching.tenant_queue_share"), std::string::npos) << e.what();
  }
  std::future<JobResult> other;
  ASSERT_NO_THROW(other = f.submit({sentence(2)}, beam(1), Clock::time_point::max(), nullptr, {"other"}));
  EXPECT_EQ(f.scheduler->queued_sentences(), 5u);
  f.release();
  // One slot: sentences leave the queue one at a time, the other's second (behind one of the
  // hog's, not four). The backlog was queued first, so its last sentence, admitted after the
  // other's, waited longer than the other's did.
  const JobResult got = other.get(), hog = backlog.get();
  ASSERT_TRUE(got.ok);
  ASSERT_TRUE(hog.ok);
  EXPECT_LT(got.queue_seconds, hog.queue_seconds);
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
  // The first alone, so that the held first step holds one of them whatever the threads'
  // timing (had it taken seven, the eighth would be a lone newcomer that waits the delay).
  engine->hold();
  std::vector<std::future<JobResult>> busy;
  busy.push_back(submit(150));
  ASSERT_TRUE(engine->wait_held_step(kPatience));
  for (int i = 1; i < 8; ++i) busy.push_back(submit(150));
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
