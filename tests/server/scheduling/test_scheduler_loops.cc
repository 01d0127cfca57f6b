// Several decode loops sharing one model's queue (scripted engines): the other loop takes
// what one cannot, lone requests that wake nobody still reach a loop, even shares beyond the
// fill, one loop up to it, an emptier loop draining into a fuller one, a client's lone
// requests staying on one loop, idle loops trimming their engines' memory. How:
// scheduler_fixture.h.
#include <random>

#include "tests/server/scheduling/scheduler_fixture.h"

using namespace scheduler_test;

TEST(SchedulerLoops, SeveralLoopsShareTheQueue) {
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

TEST(SchedulerLoops, LoneRequestsQueuedWhileALoopPollsReachTheOtherLoop) {
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

TEST(SchedulerLoops, SeveralLoopsTakeEvenSharesOfARequestBeyondTheFill) {
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

TEST(SchedulerLoops, UpToTheFillOneLoopDecodesEverySentence) {
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

TEST(SchedulerLoops, AnEmptierDecodingLoopLeavesNewcomersToAFullerOne) {
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

TEST(SchedulerLoops, OneClientsLoneRequestsStayOnOneLoop) {
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
      sent->get_future().wait_for(kPatience);  // bounded: a failed test must still stop
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

TEST(SchedulerLoops, LoneRequestsAfterAnyPauseAreAllServed) {
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

TEST(SchedulerLoops, IdleLoopsGiveBackTheirEnginesMemory) {
  // The engines keep memory past use for 50 ms (Engine::memory_retention). A loop that has
  // decoded and gone idle releases nothing more, so it trims its engine once, when that has
  // passed, never while the engine holds a sentence; the engines serve as before afterwards.
  SchedulingOptions o = options(16, 64);
  o.loop_fill_sentences = 8;  // 16 sentences: both loops decode
  Fixture f(o, 2);
  for (auto& e : f.engines) e->retention_ms = 50;
  f.hold();
  auto all = f.submit(std::vector<std::vector<int>>(16, sentence(20)), beam(2));
  EXPECT_TRUE(f.held(0));
  EXPECT_TRUE(f.held(1));
  f.release();
  EXPECT_TRUE(all.get().ok);
  EXPECT_TRUE(eventually([&] { return f.engines[0]->idle_trims > 0 && f.engines[1]->idle_trims > 0; }))
      << "trims: " << f.engines[0]->idle_trims << " and " << f.engines[1]->idle_trims;
  std::this_thread::sleep_for(milliseconds(200));  // an idle loop trims once, then sleeps
  for (auto& e : f.engines) {
    EXPECT_EQ(e->idle_trims, 1);
    EXPECT_EQ(e->busy_trims, 0);
  }
  EXPECT_EQ(f.idle_trim_reports, 2);  // each reported (the memory gauge reads the engine then)
  EXPECT_TRUE(f.submit({sentence(3)}, beam(2)).get().ok);
}
