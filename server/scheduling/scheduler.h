#pragma once
// Step-level batching across concurrent requests (docs/data-flow.md, docs/server.md): one bounded queue per
// model and one decode loop per replica (engine copy), each on its own thread. Between two
// decoder steps a loop admits waiting sentences, oldest first, while it has free sentence
// slots and cache rows, within an encoder token budget per admission; finished sentences
// leave at once, and a request is answered as soon as its last sentence is done. Cancelled
// and expired sentences leave the loop (or the queue) at the next step.
//
// Nothing here waits on a request: submit() returns at once and the request's callback runs
// exactly once, on the scheduler's responder thread (or a loop thread when a loop fails it,
// or the caller's thread when cancel() ends it), so the gRPC layer holds no thread per
// request.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "model/decoding/decode_loop.h"
#include "model/decoding/decode_options.h"
#include "model/error.h"
#include "model/translator.h"
#include "server/scheduling/admission_policy.h"
#include "server/scheduling/fair_queue.h"
#include "server/scheduling/scheduling_options.h"

namespace nmt::server {

using Clock = std::chrono::steady_clock;

// The outcome of one request.
struct JobResult {
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;  // when !ok
  std::string message;                     // when !ok
  std::vector<Translation> translations;   // when ok: one per sentence, in request order
  double queue_seconds = 0;   // longest wait of its sentences before they were admitted
  double decode_seconds = 0;  // from its first admission to its last sentence's end (the
                              // encode included: it rides on a decoder step)
  int decode_steps = 0;       // the most decoder steps one of its sentences took
};

using JobCallback = std::function<void(JobResult result)>;

// Whose request a job is (fair_queue.h): the API key, the peer address or x-tenant, as the
// frontend identified it; its weight scales its share of the queue and of the admissions.
struct QueueTenant {
  std::string id;
  int weight = 1;
};

// Observes the loops (metrics); called on loop threads.
struct SchedulerHooks {
  // After each step of loop `loop` (its index in the constructor's list), on its thread:
  // active rows and sentences, sentences encoded with the step, the step's duration and
  // the time of an idle loop's encode before it (0 when the encode overlapped the step).
  std::function<void(int loop, int rows, int sentences, int admitted, double step_seconds,
                     double encode_seconds)>
      on_step;
  // A sentence's first decoder step finished this long after it was submitted.
  std::function<void(double seconds)> on_first_step;
  // Loop `loop`, idle, had its engine give back memory (DecodeLoop::trim_idle_memory), on
  // its thread: what its engine holds changed with no step to report it.
  std::function<void(int loop)> on_idle_trim;
};

class Job;

class Scheduler {
 public:
  // One thread per loop, and one that answers finished sentences, detokenized with
  // `detokenize` (the loops leave texts empty; without it, answers carry ids only). The loops
  // (and their engines) must outlive the scheduler.
  Scheduler(std::vector<DecodeLoop*> loops, SchedulingOptions options, SchedulerHooks hooks = {},
            DetokenizeFn detokenize = {});
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues one request's sentences (token ids, </s> included) for `tenant`, in fair order
  // (fair_queue.h). Throws nmt::Error at once: kResourceExhausted when the tenant's share or
  // the queue cannot take them all or a sentence can never fit a loop (its beam over the
  // rows, its source over the slot length), kInvalidArgument when there are none,
  // kUnavailable after stop(). Otherwise `done` runs exactly once later.
  // `glossary`: empty, or per sentence its DecodeOptions::glossary_phrases (the one option
  // that differs between a request's sentences: server/glossary).
  std::shared_ptr<Job> submit(std::vector<std::vector<int>> source_ids,
                              const DecodeOptions& options, Clock::time_point deadline,
                              JobCallback done, const QueueTenant& tenant = {},
                              std::vector<std::vector<std::vector<int>>> glossary = {});

  // The client went away: the job ends CANCELLED (its callback runs unless it already
  // did); its sentences leave the queue or their loop at the next step.
  void cancel(const std::shared_ptr<Job>& job);

  // Refuses new work, finishes every queued and active sentence, joins the loops.
  // Idempotent.
  void stop();

  size_t queued_sentences() const;
  int active_sentences() const;

 private:
  struct Waiting {
    std::shared_ptr<Job> job;
    size_t index;  // sentence within the job
    Clock::time_point enqueued;
  };
  // The fair order: (start tag, arrival number), smallest first.
  using Queue = std::map<std::pair<uint64_t, uint64_t>, Waiting>;
  struct Running;  // a sentence in a loop
  struct Done;     // a finished sentence on its way to its request

  void run(int index);
  void respond();
  // The sentences admission_policy.h admits into loop `index` now, off the queue.
  std::vector<Waiting> take_admissible(int index, int steps_since_admit, Clock::time_point now,
                                       bool* deferred);
  const AdmissionSnapshot& snapshot_locked();  // the queue and loads as the policy sees them
  bool wait_for_work(std::unique_lock<std::mutex>& lock, int index, std::optional<Clock::time_point> until);
  void answer(std::vector<Done>& finished);
  void purge_queue(Clock::time_point now);
  void erase_from_queue(const std::function<bool(const Waiting&)>& drop);  // under mutex_
  void check_fits(const std::vector<std::vector<int>>& source_ids, const DecodeOptions& options) const;

  std::vector<DecodeLoop*> loops_;
  SchedulingOptions options_;
  SchedulerHooks hooks_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Idle loops that leave the queue to a running loop (loop_fill_sentences) wait here: woken
  // when the model's sentences pass the fill, not by every request.
  std::condition_variable spill_;
  // The policy's view, refreshed by snapshot_locked(); its loops hold each loop's capacity
  // and its sentences and rows as of its last admission (read by the other loops).
  AdmissionSnapshot admission_;
  Queue queue_;           // in fair order (fair_queue.h)
  FairQueue fair_;        // the tenants' tags and shares of queue_
  uint64_t arrivals_ = 0;  // arrival numbers of queue_
  std::atomic<size_t> queued_{0};  // queue_.size(), read without the lock by idle loops
  bool stopping_ = false;
  int last_idle_loop_ = 0;  // the loop that went idle most recently: it polls, the others sleep
  int spinning_ = 0;        // loops polling the queue now (0 or 1)
  std::atomic<int> active_{0};  // sentences in the loops
  std::vector<std::thread> threads_;

  const DetokenizeFn detokenize_;
  std::mutex done_mutex_;
  std::condition_variable done_ready_;
  std::vector<Done> done_;
  bool responder_stopping_ = false;
  std::vector<std::thread> responders_;
};

}  // namespace nmt::server
