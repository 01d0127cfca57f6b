#pragma once
// The threads that take the events of the server's completion queue, where every call of
// TranslationService and of the health service is served on gRPC's asynchronous API
// (server/grpc/queue_event.h).
//
// While calls are few, one thread (the lead) takes the events alone; up to `threads` - 1
// helpers join while the queue's threads keep more than half a core busy, and leave the queue
// once they keep less than a quarter. Why not all the threads all the time: Debian's gRPC 1.51
// (epoll1) has one thread at a time asleep in the socket poller and passes that role among
// the threads waiting on a queue, so that with several a call's arrival could wake one thread
// which then woke another. On one H200 machine (server run 40, calls 14-15), against four
// threads always on the queue with gRPC's callback threads beside them: an empty call's round
// trip 0.08-0.10 ms against 0.12-0.21, a lone client's translation 0.31-0.47 ms over the
// engine's batch-1 p50 against 0.34-0.57, and 256 clients' empty calls 74-94k a second
// against 25-79k. One thread alone carried 18-26k single-sentence calls a second where four
// carried 44-47k (256 clients, call 5).
// The measure is the threads' CPU time, not their events: 64 clients sending 8 sentences a
// call bring few events, each heavy (parsing, tokenizing, answering 8 sentences); when the
// helpers waited for 30k events a second they never came (64 x 8 at 76-79% of offline batch
// 512 against 96-103% before, call 9).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace nmt::server {

// Whether helpers should take events, from the CPU time the queue's threads spent in a
// while (in cores), with hysteresis: wanted from `on_cores`, no longer below `off_cores`.
class HelperDemand {
 public:
  HelperDemand(double on_cores, double off_cores) : on_(on_cores), off_(off_cores) {}
  // The threads were busy `cpu_seconds` in `seconds` (> 0): whether helpers are wanted now.
  bool update(double cpu_seconds, double seconds) {
    const double cores = cpu_seconds / seconds;
    wanted_ = wanted_ ? cores >= off_ : cores >= on_;
    return wanted_;
  }
  bool wanted() const { return wanted_; }

 private:
  const double on_;
  const double off_;
  bool wanted_ = false;
};

class QueueThreads {
 public:
  // Half a core: the lead is then busy every other moment, and an arrival waits on it.
  static constexpr double kHelpersOn = 0.5;
  static constexpr double kHelpersOff = 0.25;
  // How often the demand is reviewed (and each thread adds its CPU time), and how long an
  // idle helper waits before it looks again.
  static constexpr std::chrono::milliseconds kWindow{10};

  // `threads` >= 1 in all, on `queue`, which must outlive them; helpers wanted from
  // `helpers_on` cores busy until below `helpers_off`.
  QueueThreads(grpc::ServerCompletionQueue& queue, int threads, double helpers_on = kHelpersOn,
               double helpers_off = kHelpersOff);
  ~QueueThreads();  // stop()s

  void start();
  // After the server's Shutdown() has returned: shuts the queue down, takes every event
  // left on it and joins the threads. Idempotent.
  void stop();

  // Threads taking events now: 1, or all of them while helpers are wanted (for tests).
  int taking() const { return taking_.load(std::memory_order_relaxed); }

 private:
  // A thread's CPU time, added to cpu_ns_ once a window (meter()) and when it leaves the
  // queue (add_cpu()).
  struct CpuMeter {
    int64_t last_ns;
    std::chrono::steady_clock::time_point last_add;
  };
  CpuMeter start_meter() const;
  void meter(CpuMeter& m, std::chrono::steady_clock::time_point now);
  void add_cpu(CpuMeter& m, std::chrono::steady_clock::time_point now);

  void lead();
  void help();
  // A helper's turn on the queue: takes events while helpers are wanted or the server stops.
  // True once the queue is shut down.
  bool take_while_wanted();
  // The lead, every kWindow or so: whether helpers are wanted from the CPU time since the
  // last review.
  void review(std::chrono::steady_clock::time_point now);

  grpc::ServerCompletionQueue& queue_;
  const int threads_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> cpu_ns_{0};  // the threads' CPU time, as far as they have added it
  std::atomic<int> taking_{0};
  std::atomic<bool> helpers_wanted_{false};
  HelperDemand demand_;  // the lead's
  std::chrono::steady_clock::time_point window_start_;
  int64_t window_cpu_ns_ = 0;  // cpu_ns_ at window_start_
  std::mutex mutex_;  // orders helpers_wanted_ and stopping_ with the helpers' waits
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};  // set (under mutex_) by stop()
};

}  // namespace nmt::server
