#include "server/queue_threads.h"

#include "server/queue_event.h"

namespace nmt::server {
namespace {

gpr_timespec after(std::chrono::steady_clock::time_point when) {
  const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
      when - std::chrono::steady_clock::now());
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_micros(std::max<int64_t>(wait.count(), 0), GPR_TIMESPAN));
}

}  // namespace

QueueThreads::QueueThreads(grpc::ServerCompletionQueue& queue, int threads, double helpers_on,
                           double helpers_off)
    : queue_(queue), threads_(std::max(threads, 1)), demand_(helpers_on, helpers_off) {}

QueueThreads::~QueueThreads() { stop(); }

void QueueThreads::start() {
  window_start_ = std::chrono::steady_clock::now();
  taking_ = 1;
  workers_.emplace_back([this] { lead(); });
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { help(); });
}

void QueueThreads::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
  }
  wake_.notify_all();  // the helpers drain the queue with the lead
  queue_.Shutdown();
  if (workers_.empty()) {  // never started: drained here
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) take(tag, ok);
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void QueueThreads::take(void* tag, bool ok) {
  events_.fetch_add(1, std::memory_order_relaxed);
  static_cast<QueueEvent*>(tag)->fire(ok);
}

void QueueThreads::review(std::chrono::steady_clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - window_start_).count();
  const int64_t events = events_.load(std::memory_order_relaxed);
  const bool wanted = demand_.update(events - window_events_, seconds);
  window_start_ = now;
  window_events_ = events;
  if (wanted == helpers_wanted_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    helpers_wanted_ = wanted;
  }
  if (wanted) wake_.notify_all();
}

// The lead waits on the queue without end while it is alone (an idle server's threads
// sleep), else a window at a time, so that it reviews the rate when the events stop.
void QueueThreads::lead() {
  void* tag = nullptr;
  bool ok = false;
  while (true) {
    const bool helped = helpers_wanted_.load(std::memory_order_relaxed);
    const gpr_timespec deadline =
        helped ? after(window_start_ + kWindow) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    const auto status = queue_.AsyncNext(&tag, &ok, deadline);
    if (status == grpc::CompletionQueue::SHUTDOWN) return;
    if (status == grpc::CompletionQueue::GOT_EVENT) take(tag, ok);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= kWindow) review(now);
  }
}

// A helper sleeps off the queue until it is wanted, and leaves the queue when it no longer
// is (within a window). Once the server stops, every thread drains the queue.
void QueueThreads::help() {
  void* tag = nullptr;
  bool ok = false;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return helpers_wanted_.load() || stopping_; });
    lock.unlock();
    taking_.fetch_add(1, std::memory_order_relaxed);
    while (true) {
      const auto status =
          queue_.AsyncNext(&tag, &ok, after(std::chrono::steady_clock::now() + kWindow));
      if (status == grpc::CompletionQueue::SHUTDOWN) {
        taking_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      if (status == grpc::CompletionQueue::GOT_EVENT) take(tag, ok);
      if (!helpers_wanted_.load(std::memory_order_relaxed)) {
        std::lock_guard<std::mutex> check(mutex_);
        if (!stopping_) break;
      }
    }
    taking_.fetch_sub(1, std::memory_order_relaxed);
    lock.lock();
  }
}

}  // namespace nmt::server
