#pragma once
// Dynamic batching across concurrent requests (DESIGN.md §2, §6): one queue per model and
// one worker thread per translator of that model (models[].workers). The worker takes the oldest waiting sentence, gathers the queued
// sentences whose DecodeOptions equal its own, and once max_wait_ms has passed for the
// oldest (or enough work is waiting) runs the batch of similar lengths that holds it: the
// group sorted by length and cut into chunks within max_batch_tokens and
// max_batch_sentences. The backend is a plain function, so the policy is tested with a fake
// and no model.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/decode_options.h"
#include "model/error.h"
#include "model/translator.h"

namespace nmt::server {

using Clock = std::chrono::steady_clock;

struct BatchingOptions {
  // Padded cost of a batch: sentences x longest source (tokens, </s> included) x beam.
  // A sentence that alone exceeds it still runs, alone.
  int max_batch_tokens = 8192;
  int max_batch_sentences = 128;
  int max_wait_ms = 1;             // how long the oldest sentence may wait for company
  int max_queue_sentences = 4096;  // waiting sentences; beyond it submit() refuses
};

// Translates one batch; the same contract as nmt::Translator::translate_ids.
using TranslateBatchFn = std::function<std::vector<Translation>(
    const std::vector<std::vector<int>>& source_ids, const DecodeOptions& options,
    BatchStats* stats, const CancelFn& cancelled)>;

// Called from the worker after each batch (metrics).
using BatchHook = std::function<void(size_t sentences, const BatchStats& stats)>;

// The outcome of one request.
struct JobResult {
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;  // when !ok
  std::string message;                     // when !ok
  std::vector<Translation> translations;   // when ok: one per sentence, in request order
  double queue_seconds = 0;   // longest wait of its sentences before their batch started
  double encode_seconds = 0;  // summed over the batches that held its sentences
  double decode_seconds = 0;
};

class Job;

class Batcher {
 public:
  // One worker thread per function: each drives its own translator, so that one batch's host
  // work (beam bookkeeping, tokenization) overlaps another batch's device work.
  Batcher(std::vector<TranslateBatchFn> translators, BatchingOptions options,
          BatchHook on_batch = {});
  Batcher(TranslateBatchFn translate, BatchingOptions options, BatchHook on_batch = {})
      : Batcher(std::vector<TranslateBatchFn>{std::move(translate)}, options, std::move(on_batch)) {}
  ~Batcher();  // stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues one request's sentences (token ids). Throws nmt::Error(kResourceExhausted) at
  // once when the queue cannot take them all, kInternal after stop().
  std::shared_ptr<Job> submit(std::vector<std::vector<int>> source_ids,
                              const DecodeOptions& options,
                              Clock::time_point deadline = Clock::time_point::max());

  // Blocks until the job is done. The deadline and client_cancelled() (polled after poll_ms,
  // backing off to 100 ms) end the wait early; the job is then cancelled: its waiting sentences leave the
  // queue and its decoding sentences are dropped at the next decoder step.
  JobResult wait(const std::shared_ptr<Job>& job, const std::function<bool()>& client_cancelled = {},
                 int poll_ms = 10);

  // Marks the job cancelled (client went away); wakes the worker to free its queue slots.
  void cancel(const std::shared_ptr<Job>& job);

  // Finishes every queued sentence, then joins the worker. Idempotent.
  void stop();

  size_t queued_sentences() const;

 private:
  struct Item {
    std::shared_ptr<Job> job;
    size_t index;  // sentence index within the job
    Clock::time_point enqueued;
  };

  void run(const TranslateBatchFn& translate);
  void purge_stopped(Clock::time_point now);
  bool ready(const std::vector<size_t>& group, Clock::time_point now) const;
  std::vector<Item> take_batch(const std::vector<size_t>& group);
  void execute(std::vector<Item>& batch, const TranslateBatchFn& translate);

  std::vector<TranslateBatchFn> translators_;
  BatchingOptions options_;
  BatchHook on_batch_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;  // arrival order
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace nmt::server
