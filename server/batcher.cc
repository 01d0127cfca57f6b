#include "server/batcher.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <unordered_map>

namespace nmt::server {
namespace {

bool same_options(const DecodeOptions& a, const DecodeOptions& b) {
  return a.beam_size == b.beam_size && a.num_hypotheses == b.num_hypotheses &&
         a.length_penalty == b.length_penalty && a.max_decoding_length == b.max_decoding_length &&
         a.min_decoding_length == b.min_decoding_length && a.return_scores == b.return_scores;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

// One request: its sentences, their results, and how it ended. Shared by the request
// thread (waits, cancels) and the worker (fills results).
class Job {
 public:
  Job(std::vector<std::vector<int>> ids, const DecodeOptions& options, Clock::time_point deadline)
      : source_ids(std::move(ids)), options(options), deadline(deadline),
        remaining_(source_ids.size()) {
    result_.translations.resize(source_ids.size());
  }

  const std::vector<std::vector<int>> source_ids;
  const DecodeOptions options;
  const Clock::time_point deadline;
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
  bool should_stop(Clock::time_point now) const {
    ErrorCode code;
    std::string message;
    return should_stop(now, &code, &message);
  }

  void fail(ErrorCode code, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    result_.ok = false;
    result_.code = code;
    result_.message = message;
    result_.translations.clear();
    finish_locked();
  }

  void complete(size_t index, Translation translation) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    result_.translations[index] = std::move(translation);
    if (--remaining_ == 0) {
      result_.ok = true;
      finish_locked();
    }
  }

  void add_timing(double queue_seconds, const BatchStats& stats) {
    std::lock_guard<std::mutex> lock(mutex_);
    result_.queue_seconds = std::max(result_.queue_seconds, queue_seconds);
    result_.encode_seconds += stats.encode_seconds;
    result_.decode_seconds += stats.decode_seconds;
  }

  // Waits up to `timeout`; true when the job is done.
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return done_cv_.wait_for(lock, timeout, [&] { return done_.load(); });
  }

  JobResult result() {
    std::lock_guard<std::mutex> lock(mutex_);
    return result_;
  }

 private:
  void finish_locked() {
    done_ = true;
    done_cv_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::atomic<bool> done_{false};
  size_t remaining_;
  JobResult result_;
};

Batcher::Batcher(std::vector<TranslateBatchFn> translators, BatchingOptions options,
                 BatchHook on_batch)
    : translators_(std::move(translators)), options_(options), on_batch_(std::move(on_batch)) {
  if (translators_.empty()) throw Error(ErrorCode::kInternal, "a batcher needs a translator");
  for (const TranslateBatchFn& translate : translators_) {
    workers_.emplace_back([this, &translate] { run(translate); });
  }
}

Batcher::~Batcher() { stop(); }

std::shared_ptr<Job> Batcher::submit(std::vector<std::vector<int>> source_ids,
                                     const DecodeOptions& options, Clock::time_point deadline) {
  auto job = std::make_shared<Job>(std::move(source_ids), options, deadline);
  const size_t n = job->source_ids.size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Error(ErrorCode::kInternal, "the batcher is stopped");
    if (queue_.size() + n > static_cast<size_t>(options_.max_queue_sentences)) {
      throw Error(ErrorCode::kResourceExhausted,
                  "server overloaded: " + std::to_string(queue_.size()) +
                      " sentences already queued (batching.max_queue_sentences = " +
                      std::to_string(options_.max_queue_sentences) + "); retry later");
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < n; ++i) queue_.push_back(Item{job, i, now});
  }
  wake_.notify_one();
  if (n == 0) job->fail(ErrorCode::kInvalidArgument, "no sentences to translate");
  return job;
}

JobResult Batcher::wait(const std::shared_ptr<Job>& job,
                        const std::function<bool()>& client_cancelled, int poll_ms) {
  // The client's cancellation is polled from poll_ms backing off to kMaxPoll: a thousand
  // waiting requests (streams) polling every 10 ms kept two cores busy switching threads.
  // The deadline is met exactly: no wait runs past it.
  constexpr std::chrono::milliseconds kMaxPoll(100);
  auto poll = std::chrono::milliseconds(std::max(1, poll_ms));
  const auto max_poll = std::max(poll, kMaxPoll);
  while (true) {
    auto timeout = poll;
    if (job->deadline != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(job->deadline - Clock::now());
      timeout = std::clamp(left, std::chrono::milliseconds(1), poll);
    }
    if (job->wait_for(timeout)) break;
    ErrorCode code;
    std::string message;
    if (client_cancelled && client_cancelled()) job->cancelled = true;
    if (job->should_stop(Clock::now(), &code, &message)) {
      job->fail(code, message);
      wake_.notify_one();  // let the worker free the job's queue slots now
    }
    poll = std::min(2 * poll, max_poll);
  }
  return job->result();
}

void Batcher::cancel(const std::shared_ptr<Job>& job) {
  job->cancelled = true;
  job->fail(ErrorCode::kCancelled, "request cancelled by the client");
  wake_.notify_one();
}

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

size_t Batcher::queued_sentences() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

// Drops waiting sentences of cancelled, expired or already failed jobs (they never enter a
// batch), failing their jobs with the reason.
void Batcher::purge_stopped(Clock::time_point now) {
  auto stopped = [&](const Item& item) {
    ErrorCode code;
    std::string message;
    if (!item.job->should_stop(now, &code, &message)) return false;
    item.job->fail(code, message);
    return true;
  };
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), stopped), queue_.end());
}

// A batch is formed when the oldest sentence has waited max_wait_ms, when its group could
// already fill a batch, or when stopping (drain without waiting).
bool Batcher::ready(const std::vector<size_t>& group, Clock::time_point now) const {
  if (stopping_) return true;
  const Item& oldest = queue_[group.front()];
  if (now - oldest.enqueued >= std::chrono::milliseconds(options_.max_wait_ms)) return true;
  if (group.size() >= static_cast<size_t>(options_.max_batch_sentences)) return true;
  int64_t tokens = 0;
  for (size_t i : group) {
    const Item& item = queue_[i];
    tokens += static_cast<int64_t>(item.job->source_ids[item.index].size()) *
              item.job->options.beam_size;
  }
  return tokens >= options_.max_batch_tokens;
}

// Sorts the group by source length, cuts it from the shortest up into consecutive chunks
// that fit the padded cost and sentence count, and takes the chunk holding the oldest
// sentence. Taking a chunk leaves the cuts below it unchanged, so successive batches hold
// disjoint length ranges.
std::vector<Batcher::Item> Batcher::take_batch(const std::vector<size_t>& group) {
  auto length = [&](size_t queue_index) {
    const Item& item = queue_[queue_index];
    return static_cast<int64_t>(item.job->source_ids[item.index].size());
  };
  std::vector<size_t> sorted = group;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](size_t a, size_t b) { return length(a) < length(b); });
  const int64_t beam = queue_[group.front()].job->options.beam_size;
  auto fits = [&](size_t count, int64_t longest) {
    return count <= static_cast<size_t>(options_.max_batch_sentences) &&
           static_cast<int64_t>(count) * longest * beam <= options_.max_batch_tokens;
  };
  size_t lo = 0, hi = 0;  // the chunk [lo, hi) of `sorted`
  bool has_oldest = false;
  while (true) {
    hi = lo + 1;  // a chunk holds at least one sentence, even an oversized one
    while (hi < sorted.size() && fits(hi - lo + 1, length(sorted[hi]))) ++hi;
    for (size_t i = lo; i < hi && !has_oldest; ++i) has_oldest = sorted[i] == group.front();
    if (has_oldest) break;
    lo = hi;
  }
  std::vector<Item> batch;
  batch.reserve(hi - lo);
  std::vector<bool> taken(queue_.size(), false);
  for (size_t i = lo; i < hi; ++i) {
    batch.push_back(queue_[sorted[i]]);
    taken[sorted[i]] = true;
  }
  size_t kept = 0;  // one pass keeps the rest in arrival order
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (!taken[i]) queue_[kept++] = std::move(queue_[i]);
  }
  queue_.resize(kept);
  return batch;
}

void Batcher::run(const TranslateBatchFn& translate) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const Clock::time_point now = Clock::now();
    purge_stopped(now);
    if (queue_.empty()) {
      if (stopping_) return;
      wake_.wait(lock);
      continue;
    }
    std::vector<size_t> group;
    for (size_t i = 0; i < queue_.size(); ++i) {
      if (same_options(queue_[i].job->options, queue_.front().job->options)) group.push_back(i);
    }
    if (!ready(group, now)) {
      wake_.wait_until(lock, queue_.front().enqueued +
                                 std::chrono::milliseconds(options_.max_wait_ms));
      continue;
    }
    std::vector<Item> batch = take_batch(group);
    lock.unlock();
    execute(batch, translate);
    lock.lock();
  }
}

void Batcher::execute(std::vector<Item>& batch, const TranslateBatchFn& translate) {
  const Clock::time_point start = Clock::now();
  std::vector<std::vector<int>> ids;
  ids.reserve(batch.size());
  for (const Item& item : batch) ids.push_back(item.job->source_ids[item.index]);
  const CancelFn cancelled = [&](size_t i) { return batch[i].job->should_stop(Clock::now()); };

  BatchStats stats;
  std::vector<Translation> translations;
  try {
    translations = translate(ids, batch.front().job->options, &stats, cancelled);
    if (translations.size() != batch.size()) {
      throw Error(ErrorCode::kInternal, "the engine returned " +
                                            std::to_string(translations.size()) +
                                            " translations for " + std::to_string(batch.size()));
    }
  } catch (const Error& e) {
    for (Item& item : batch) item.job->fail(e.code(), e.what());
    return;
  } catch (const std::exception& e) {
    for (Item& item : batch) item.job->fail(ErrorCode::kInternal, e.what());
    return;
  }
  if (on_batch_) on_batch_(batch.size(), stats);

  std::unordered_map<Job*, double> waited;  // per job: its longest queue wait
  for (const Item& item : batch) {
    double& w = waited[item.job.get()];
    w = std::max(w, seconds_between(item.enqueued, start));
  }
  for (const auto& [job, seconds] : waited) job->add_timing(seconds, stats);

  for (size_t i = 0; i < batch.size(); ++i) {
    Job& job = *batch[i].job;
    if (translations[i].cancelled) {
      ErrorCode code = ErrorCode::kCancelled;
      std::string message = "request cancelled";
      job.should_stop(Clock::now(), &code, &message);
      job.fail(code, message);
    } else {
      job.complete(batch[i].index, std::move(translations[i]));
    }
  }
}

}  // namespace nmt::server
