#pragma once
// The threads that take the events of the server's completion queue, where every call of
// TranslationService and of the health service is served on gRPC's asynchronous API
// (server/queue_event.h).
//
// While events are few, one thread (the lead) takes them alone; up to `threads` - 1 helpers
// join while they come faster than HelperDemand's rate, and leave the queue once they come
// slower. Why not all the threads all the time: Debian's gRPC 1.51 (epoll1) has one thread
// at a time asleep in the socket poller and passes that role among the threads waiting on a
// queue, so that with several a call's arrival woke one thread which then woke another. A
// lone client's answer came 0.09 ms sooner with one thread (+0.30 ms over the engine's
// batch-1 p50 against +0.39, H200, server run 40). But one thread carried 18-26k
// single-sentence calls a second where four carried 44-47k (256 clients, the same run).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace nmt::server {

// Whether helpers should take events, from the rate they arrive at, with hysteresis: wanted
// from `on_per_second` events a second, no longer below `off_per_second`.
class HelperDemand {
 public:
  HelperDemand(double on_per_second, double off_per_second)
      : on_(on_per_second), off_(off_per_second) {}
  // `events` came in `seconds` (> 0): whether helpers are wanted now.
  bool update(int64_t events, double seconds) {
    const double rate = double(events) / seconds;
    wanted_ = wanted_ ? rate >= off_ : rate >= on_;
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
  // A Translate call brings three events (its arrival, its finish, its end): 30k events a
  // second is about 10k calls, which one thread took without a queue (64 clients, 18k calls a
  // second, were served as fast by one thread as by four in server run 40).
  static constexpr double kHelpersOn = 30000;
  static constexpr double kHelpersOff = 15000;
  // How often the rate is reviewed, and how long an idle helper waits before it looks again.
  static constexpr std::chrono::milliseconds kWindow{10};

  // `threads` >= 1 in all, on `queue`, which must outlive them; helpers wanted from
  // `helpers_on` events a second until below `helpers_off`.
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
  void lead();
  void help();
  void take(void* tag, bool ok);
  // The lead, every kWindow or so: whether helpers are wanted from the events since the
  // last review.
  void review(std::chrono::steady_clock::time_point now);

  grpc::ServerCompletionQueue& queue_;
  const int threads_;
  std::vector<std::thread> workers_;
  std::atomic<int64_t> events_{0};
  std::atomic<int> taking_{0};
  std::atomic<bool> helpers_wanted_{false};
  HelperDemand demand_;  // the lead's
  std::chrono::steady_clock::time_point window_start_;
  int64_t window_events_ = 0;  // events_ at window_start_
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // under mutex_
  bool stopped_ = false;
};

}  // namespace nmt::server
