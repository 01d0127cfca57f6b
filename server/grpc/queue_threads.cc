#include "server/grpc/queue_threads.h"

#include <time.h>

#include "server/grpc/queue_event.h"

namespace nmt::server {
namespace {

using Clock = std::chrono::steady_clock;

gpr_timespec after(Clock::time_point when) {
  const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(when - Clock::now());
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_micros(std::max<int64_t>(wait.count(), 0), GPR_TIMESPAN));
}

int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void take(void* tag, bool ok) { static_cast<QueueEvent*>(tag)->fire(ok); }

}  // namespace

QueueThreads::QueueThreads(grpc::ServerCompletionQueue& queue, int threads, double helpers_on,
                           double helpers_off)
    : queue_(queue), threads_(std::max(threads, 1)), demand_(helpers_on, helpers_off) {}

QueueThreads::~QueueThreads() { stop(); }

void QueueThreads::start() {
  window_start_ = Clock::now();
  taking_ = 1;
  workers_.emplace_back([this] { lead(); });
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { help(); });
}

void QueueThreads::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
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

QueueThreads::CpuMeter QueueThreads::start_meter() const { return {thread_cpu_ns(), Clock::now()}; }

void QueueThreads::meter(CpuMeter& m, Clock::time_point now) {
  if (now - m.last_add >= kWindow) add_cpu(m, now);
}

void QueueThreads::add_cpu(CpuMeter& m, Clock::time_point now) {
  const int64_t cpu = thread_cpu_ns();
  cpu_ns_.fetch_add(cpu - m.last_ns, std::memory_order_relaxed);
  m.last_ns = cpu;
  m.last_add = now;
}

void QueueThreads::review(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - window_start_).count();
  const int64_t cpu = cpu_ns_.load(std::memory_order_relaxed);
  const bool wanted = demand_.update(double(cpu - window_cpu_ns_) * 1e-9, seconds);
  window_start_ = now;
  window_cpu_ns_ = cpu;
  if (wanted == helpers_wanted_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    helpers_wanted_ = wanted;
  }
  if (wanted) wake_.notify_all();
}

// The lead waits on the queue without end while it is alone (an idle server's threads
// sleep), else a window at a time, so that it reviews the demand when the events stop.
void QueueThreads::lead() {
  void* tag = nullptr;
  bool ok = false;
  CpuMeter m = start_meter();
  while (true) {
    const bool helped = helpers_wanted_.load(std::memory_order_relaxed);
    const gpr_timespec deadline =
        helped ? after(window_start_ + kWindow) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    const auto status = queue_.AsyncNext(&tag, &ok, deadline);
    if (status == grpc::CompletionQueue::SHUTDOWN) return;
    if (status == grpc::CompletionQueue::GOT_EVENT) take(tag, ok);
    const auto now = Clock::now();
    meter(m, now);
    if (now - window_start_ >= kWindow) review(now);
  }
}

// A helper sleeps off the queue until it is wanted, and leaves the queue when it no longer
// is (within a window). Once the server stops, every thread drains the queue.
void QueueThreads::help() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return helpers_wanted_.load() || stopping_.load(); });
    lock.unlock();
    taking_.fetch_add(1, std::memory_order_relaxed);
    const bool shut_down = take_while_wanted();
    taking_.fetch_sub(1, std::memory_order_relaxed);
    if (shut_down) return;
    lock.lock();
  }
}

bool QueueThreads::take_while_wanted() {
  void* tag = nullptr;
  bool ok = false;
  CpuMeter m = start_meter();
  while (true) {
    const auto status = queue_.AsyncNext(&tag, &ok, after(Clock::now() + kWindow));
    if (status == grpc::CompletionQueue::SHUTDOWN) return true;
    if (status == grpc::CompletionQueue::GOT_EVENT) take(tag, ok);
    const auto now = Clock::now();
    meter(m, now);
    if (!helpers_wanted_.load(std::memory_order_relaxed) && !stopping_.load()) {
      add_cpu(m, now);  // what it spent since its last addition
      return false;
    }
  }
}

}  // namespace nmt::server
