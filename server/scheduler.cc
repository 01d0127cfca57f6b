#include "server/scheduler.h"

#include <algorithm>
#include <exception>
#include <unordered_map>
#include <unordered_set>

namespace nmt::server {
namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

// One request: its sentences, their results, and how it ended. Shared by the caller
// (cancel) and the loops (fill results); the callback runs once, when it ends.
class Job {
 public:
  Job(std::vector<std::vector<int>> ids, const DecodeOptions& options, Clock::time_point deadline,
      JobCallback done)
      : source_ids(std::move(ids)), options(options), deadline(deadline), submitted(Clock::now()),
        remaining_(source_ids.size()), done_callback_(std::move(done)) {
    result_.translations.resize(source_ids.size());
  }

  const std::vector<std::vector<int>> source_ids;
  const DecodeOptions options;
  const Clock::time_point deadline;
  const Clock::time_point submitted;
  std::atomic<bool> cancelled{false};

  // Why the job's sentences should be dropped now, if they should.
  bool should_stop(Clock::time_point now, ErrorCode* code, std::string* message) const {
    if (done_.load()) {
      *code = ErrorCode::kCancelled;
      *message = "request already finished";
      return true;
    }
    // The deadline first: gRPC also cancels a call whose deadline passed.
    if (now >= deadline) {
      *code = ErrorCode::kDeadlineExceeded;
      *message = "deadline exceeded before the translation finished";
      return true;
    }
    if (cancelled.load()) {
      *code = ErrorCode::kCancelled;
      *message = "request cancelled by the client";
      return true;
    }
    return false;
  }
  // Fails the job when it should stop; true when it did (or had ended already).
  bool stop_if_needed(Clock::time_point now) {
    ErrorCode code;
    std::string message;
    if (!should_stop(now, &code, &message)) return false;
    fail(code, message);
    return true;
  }

  void fail(ErrorCode code, const std::string& message) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_) return;
    result_.ok = false;
    result_.code = code;
    result_.message = message;
    result_.translations.clear();
    finish(lock);
  }

  void complete(size_t index, Translation translation, Clock::time_point now) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_) return;
    result_.translations[index] = std::move(translation);
    if (--remaining_ > 0) return;
    result_.ok = true;
    result_.decode_seconds = seconds_between(first_admitted_, now);
    finish(lock);
  }

  // Its sentences of one admission: how long the longest waited, what the encode took.
  void admitted(double queue_seconds, double encode_seconds, Clock::time_point start) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!was_admitted_) first_admitted_ = start;
    was_admitted_ = true;
    result_.queue_seconds = std::max(result_.queue_seconds, queue_seconds);
    result_.encode_seconds += encode_seconds;
  }

 private:
  // The callback runs outside the lock: it may cancel or inspect the job.
  void finish(std::unique_lock<std::mutex>& lock) {
    done_ = true;
    JobResult result = std::move(result_);
    JobCallback callback = std::move(done_callback_);
    lock.unlock();
    if (callback) callback(std::move(result));
  }

  std::mutex mutex_;
  std::atomic<bool> done_{false};
  size_t remaining_;
  JobResult result_;
  JobCallback done_callback_;
  bool was_admitted_ = false;
  Clock::time_point first_admitted_;
};

// A sentence in a loop.
struct Scheduler::Running {
  std::shared_ptr<Job> job;
  size_t index;
  bool stepped = false;  // has finished a decoder step (time to first step reported)
};

Scheduler::Scheduler(std::vector<DecodeLoop*> loops, SchedulingOptions options, SchedulerHooks hooks)
    : loops_(std::move(loops)), options_(options), hooks_(std::move(hooks)) {
  if (loops_.empty()) throw Error(ErrorCode::kInternal, "a scheduler needs a decode loop");
  for (size_t i = 0; i < loops_.size(); ++i) threads_.emplace_back([this, i] { run(int(i)); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::check_fits(const std::vector<std::vector<int>>& source_ids,
                           const DecodeOptions& options) const {
  for (size_t i = 0; i < source_ids.size(); ++i) {
    std::string why;
    if (!loops_.front()->fits(source_ids[i].size(), options, &why)) {
      throw Error(ErrorCode::kResourceExhausted, "sentence " + std::to_string(i) + " can never be served here: " +
                                                     why + " (batching.max_active_rows, limits)");
    }
  }
}

std::shared_ptr<Job> Scheduler::submit(std::vector<std::vector<int>> source_ids,
                                       const DecodeOptions& options, Clock::time_point deadline,
                                       JobCallback done) {
  if (source_ids.empty()) throw Error(ErrorCode::kInvalidArgument, "no sentences to translate");
  check_fits(source_ids, options);
  auto job = std::make_shared<Job>(std::move(source_ids), options, deadline, std::move(done));
  const size_t n = job->source_ids.size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
    if (queue_.size() + n > static_cast<size_t>(options_.max_queue_sentences)) {
      throw Error(ErrorCode::kResourceExhausted,
                  "server overloaded: " + std::to_string(queue_.size()) +
                      " sentences already queued (batching.max_queue_sentences = " +
                      std::to_string(options_.max_queue_sentences) + "); retry later");
    }
    for (size_t i = 0; i < n; ++i) queue_.push_back(Waiting{job, i, job->submitted});
  }
  wake_.notify_all();  // every idle loop: a large request spreads over them
  return job;
}

void Scheduler::cancel(const std::shared_ptr<Job>& job) {
  job->cancelled = true;
  job->fail(ErrorCode::kCancelled, "request cancelled by the client");
  wake_.notify_all();  // idle loops drop its queued sentences now
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

size_t Scheduler::queued_sentences() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

int Scheduler::active_sentences() const { return active_.load(); }

// Drops waiting sentences of cancelled, expired or already failed jobs (they never enter a
// loop), failing their jobs with the reason.
void Scheduler::purge_queue(Clock::time_point now) {
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                              [&](const Waiting& w) { return w.job->stop_if_needed(now); }),
               queue_.end());
}

// The oldest waiting sentences that fit the loop now, in arrival order, within the encoder
// token budget (at least one). Strictly first come, first served: a sentence that does
// not fit yet (a large beam) is not overtaken.
std::vector<Scheduler::Waiting> Scheduler::take_admissible(const DecodeLoop& loop, Clock::time_point now) {
  purge_queue(now);
  std::vector<Waiting> taken;
  int slots = loop.capacity().sentences - loop.active_sentences();
  int rows = loop.capacity().rows - loop.active_rows();
  int64_t tokens = 0;
  while (!queue_.empty()) {
    const Waiting& w = queue_.front();
    const int beam = w.job->options.beam_size;
    const int64_t length = int64_t(w.job->source_ids[w.index].size());
    if (slots < 1 || rows < beam) break;
    if (!taken.empty() && tokens + length > options_.max_admit_tokens) break;
    slots -= 1;
    rows -= beam;
    tokens += length;
    taken.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return taken;
}

void Scheduler::run(int index) {
  DecodeLoop& loop = *loops_[size_t(index)];
  std::unordered_map<uint64_t, Running> running;
  uint64_t next_id = 0;
  auto fail_running = [&](const Error& e) {
    for (auto& [id, r] : running) r.job->fail(e.code(), e.what());
    active_ -= int(running.size());
    running.clear();
  };
  while (true) {
    std::vector<Waiting> admitted;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      admitted = take_admissible(loop, Clock::now());
      if (admitted.empty() && loop.idle()) {
        if (stopping_ && queue_.empty()) return;
        wake_.wait(lock);
        continue;
      }
    }
    // Admission: one encoder pass for what was taken.
    double encode_seconds = 0;
    if (!admitted.empty()) {
      const Clock::time_point start = Clock::now();
      std::vector<LoopSentence> sentences;
      std::vector<uint64_t> ids;
      for (const Waiting& w : admitted) {
        ids.push_back(next_id);
        sentences.push_back({next_id++, w.job->source_ids[w.index], w.job->options});
      }
      try {
        loop.admit(std::move(sentences));
        encode_seconds = seconds_between(start, Clock::now());
        std::unordered_map<Job*, double> waited;  // per job: its longest wait
        for (size_t i = 0; i < admitted.size(); ++i) {
          running[ids[i]] = Running{admitted[i].job, admitted[i].index};
          double& w = waited[admitted[i].job.get()];
          w = std::max(w, seconds_between(admitted[i].enqueued, start));
        }
        for (const auto& [job, seconds] : waited) job->admitted(seconds, encode_seconds, start);
        active_ += int(admitted.size());
      } catch (const Error& e) {
        for (Waiting& w : admitted) w.job->fail(e.code(), e.what());
      } catch (const std::exception& e) {
        for (Waiting& w : admitted) w.job->fail(ErrorCode::kInternal, e.what());
      }
    }
    // Cancelled and expired sentences leave before the step.
    const Clock::time_point now = Clock::now();
    for (auto it = running.begin(); it != running.end();) {
      if (!it->second.job->stop_if_needed(now)) {
        ++it;
        continue;
      }
      loop.remove(it->first);
      it = running.erase(it);
      --active_;
    }
    if (loop.idle()) continue;

    const int rows = loop.active_rows(), sentences = loop.active_sentences();
    const Clock::time_point step_start = Clock::now();
    std::vector<FinishedSentence> finished;
    try {
      finished = loop.step();
    } catch (const Error& e) {
      fail_running(e);
      continue;
    } catch (const std::exception& e) {
      fail_running(Error(ErrorCode::kInternal, e.what()));
      continue;
    }
    const Clock::time_point step_end = Clock::now();
    if (hooks_.on_step) {
      hooks_.on_step(index, rows, sentences, int(admitted.size()), seconds_between(step_start, step_end),
                     encode_seconds);
    }
    for (auto& [id, r] : running) {
      if (r.stepped) continue;
      r.stepped = true;
      if (hooks_.on_first_step) hooks_.on_first_step(seconds_between(r.job->submitted, step_end));
    }
    for (FinishedSentence& f : finished) {
      auto it = running.find(f.id);
      if (it == running.end()) continue;
      it->second.job->complete(it->second.index, std::move(f.translation), step_end);
      running.erase(it);
      --active_;
    }
  }
}

}  // namespace nmt::server
