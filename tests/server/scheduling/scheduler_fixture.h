#pragma once
// What the scheduler tests (test_scheduler.cc: one loop's admission, cancellation, failures
// and shutdown; test_scheduler_loops.cc: several loops sharing a model's queue) share: loops
// over scripted engines (no model) and the scheduler over them. No test assumes a machine's
// speed: a loop is stopped inside a step with the engine's gate (ScriptedEngine::hold, allow)
// where a test needs it busy, and waits are for conditions, under a deadline (kPatience) no
// correct run comes near, a loaded 2-core machine under a sanitizer included. Which sentences
// a loop admits is admission_policy.h's, tested as tables (test_admission_policy.cc); these
// tests show the threads hand the work over as it decides.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/scheduling/scheduler.h"
#include "tests/support/scripted_engine.h"

namespace scheduler_test {

using namespace nmt;
using namespace nmt::server;
using nmt::test::ScriptedEngine;
using std::chrono::microseconds;
using std::chrono::milliseconds;

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
inline const ModelConfig kConfig = ScriptedEngine::config();

inline DecodeOptions beam(int k, int max_length = 255) {
  DecodeOptions o;
  o.beam_size = k;
  o.max_decoding_length = max_length;
  return o;
}

inline std::vector<int> sentence(int eos_step) { return {eos_step, 1, 2, kEos}; }

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
    hooks.on_idle_trim = [this](int) { ++idle_trim_reports; };
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
                                std::shared_ptr<Job>* job = nullptr, const QueueTenant& tenant = {}) {
    auto promise = std::make_shared<std::promise<JobResult>>();
    auto j = scheduler->submit(std::move(ids), o, deadline,
                               [promise](JobResult r) { promise->set_value(std::move(r)); }, tenant);
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
  std::atomic<int> idle_trim_reports{0};  // SchedulerHooks::on_idle_trim calls
};

// The sentence's translation alone in a loop of its own.
inline Translation alone(const std::vector<int>& ids, const DecodeOptions& o) {
  ScriptedEngine e;
  DecodeLoop loop(e, kConfig, {1, 16, 8});
  loop.admit({{0, ids, o}});
  while (true) {
    auto done = loop.step().finished;
    if (!done.empty()) return done[0].translation;
  }
}

inline SchedulingOptions options(int sentences, int rows, int admit_tokens = 2048, int queue = 4096) {
  SchedulingOptions o;
  o.max_active_sentences = sentences;
  o.max_active_rows = rows;
  o.max_admit_tokens = admit_tokens;
  o.max_queue_sentences = queue;
  o.tenant_queue_share = 1.0;  // one tenant may fill the queue (tenants: test_fair_queue.cc)
  return o;
}

}  // namespace scheduler_test
