#include "server/scheduling/scheduler.h"

#include <algorithm>
#include <exception>
#include <unordered_map>
#include <unordered_set>

namespace nmt::server {
namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

constexpr int kResponders = 4;
// The loop that went idle last polls the queue this long before it sleeps: a condition
// variable's wake-up costs a lone request tens to hundreds of microseconds, and one closed-loop
// client's next request comes a round trip (~0.1-0.4 ms) after its answer. Measured on H100
// with one loop: single-client p50 +0.55 ms over the engine's batch-1 p50 with 200 us of
// polling, +0.25 ms with 2 ms.
constexpr std::chrono::microseconds kIdleSpin(2000);
// An idle loop that left the queue to a running loop looks again this often (the running
// loop may have filled up meanwhile).
constexpr std::chrono::milliseconds kSpillRecheck(1);

}  // namespace

// One request: its sentences, their results, and how it ended. Shared by the caller
// (cancel) and the loops (fill results); the callback runs once, when it ends.
class Job {
 public:
  Job(std::vector<std::vector<int>> ids, const DecodeOptions& options, Clock::time_point deadline,
      JobCallback done, const QueueTenant& tenant, std::vector<std::vector<std::vector<int>>> glossary)
      : source_ids(std::move(ids)), options(options), glossary(std::move(glossary)), deadline(deadline),
        submitted(Clock::now()), tenant(tenant), remaining_(source_ids.size()), done_callback_(std::move(done)) {
    result_.translations.resize(source_ids.size());
  }

  const std::vector<std::vector<int>> source_ids;
  const DecodeOptions options;
  // Glossary: empty, or per sentence its required target phrases (DecodeOptions::glossary_phrases).
  const std::vector<std::vector<std::vector<int>>> glossary;
  const Clock::time_point deadline;
  const Clock::time_point submitted;
  const QueueTenant tenant;
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

  // Answered already (failed, cancelled or complete): its queued sentences are dead weight.
  bool ended() const { return done_.load(); }

  void fail(ErrorCode code, const std::string& message) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_) return;
    result_.ok = false;
    result_.code = code;
    result_.message = message;
    result_.translations.clear();
    finish(lock);
  }

  void complete(size_t index, Translation translation, int steps, Clock::time_point now) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_) return;
    result_.translations[index] = std::move(translation);
    result_.decode_steps = std::max(result_.decode_steps, steps);
    if (--remaining_ > 0) return;
    result_.ok = true;
    result_.decode_seconds = seconds_between(first_admitted_, now);
    finish(lock);
  }

  // Its sentences of one admission: how long the longest waited.
  void admitted(double queue_seconds, Clock::time_point start) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!was_admitted_) first_admitted_ = start;
    was_admitted_ = true;
    result_.queue_seconds = std::max(result_.queue_seconds, queue_seconds);
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
};

// A finished sentence on its way to its request.
struct Scheduler::Done {
  std::shared_ptr<Job> job;
  size_t index;
  Translation translation;
  Clock::time_point at;
  int steps;  // decoder steps it took
};

Scheduler::Scheduler(std::vector<DecodeLoop*> loops, SchedulingOptions options, SchedulerHooks hooks,
                     DetokenizeFn detokenize)
    : loops_(std::move(loops)),
      options_(options),
      hooks_(std::move(hooks)),
      fair_(size_t(options.max_queue_sentences), options.tenant_queue_share),
      detokenize_(std::move(detokenize)) {
  if (loops_.empty()) throw Error(ErrorCode::kInternal, "a scheduler needs a decode loop");
  for (DecodeLoop* loop : loops_) {
    admission_.loops.push_back({0, 0, loop->capacity().sentences, loop->capacity().rows});
  }
  // Each request is answered on its own: a cache growth the engine cannot afford fails the
  // sentences that needed it, not every sentence of the loop.
  for (DecodeLoop* loop : loops_) loop->shed_on_out_of_memory(true);
  // A few responders: each answer fills a response, logs and finishes a gRPC call (tens of
  // microseconds), and 256 clients end ~16 sentences a step.
  for (int i = 0; i < kResponders; ++i) responders_.emplace_back([this] { respond(); });
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
                                       JobCallback done, const QueueTenant& tenant,
                                       std::vector<std::vector<std::vector<int>>> glossary) {
  if (source_ids.empty()) throw Error(ErrorCode::kInvalidArgument, "no sentences to translate");
  if (!glossary.empty() && glossary.size() != source_ids.size())
    throw Error(ErrorCode::kInternal, "scheduler: a glossary for " + std::to_string(glossary.size()) + " of " +
                                          std::to_string(source_ids.size()) + " sentences");
  check_fits(source_ids, options);
  auto job = std::make_shared<Job>(std::move(source_ids), options, deadline, std::move(done), tenant,
                                   std::move(glossary));
  const size_t n = job->source_ids.size();
  // A request the queue could never hold is refused as such, not as a retryable overload.
  if (n > static_cast<size_t>(options_.max_queue_sentences)) {
    throw Error(ErrorCode::kInvalidArgument,
                "the request has " + std::to_string(n) +
                    " sentences, more than the queue holds (batching.max_queue_sentences = " +
                    std::to_string(options_.max_queue_sentences) + "); send the text in parts");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
    std::string refusal = fair_.refusal(tenant.id, tenant.weight, n);
    // Cancelled requests' sentences stay queued until a loop purges them between two steps,
    // which a busy loop may not reach for a while; they hold no place, so they go first.
    // (Only ended jobs: their callbacks have run, so none runs here under the caller's locks.)
    if (!refusal.empty()) {
      erase_from_queue([](const Waiting& w) { return w.job->ended(); });
      refusal = fair_.refusal(tenant.id, tenant.weight, n);
    }
    if (!refusal.empty()) throw Error(ErrorCode::kResourceExhausted, refusal);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t tag = fair_.enqueue(tenant.id, tenant.weight);
      queue_.emplace(std::make_pair(tag, arrivals_++), Waiting{job, i, job->submitted});
    }
    queued_ = queue_.size();
    // A lone sentence is the polling loop's (warm, and no wake-up); a larger request spreads
    // over every idle loop.
    const bool within = within_fill(size_t(active_.load()), queue_.size(), options_);
    if (!within) spill_.notify_all();
    if (n == 1 && spinning_ > 0) return job;
    // A decoding loop with room takes them at its next step: an idle loop woken for them
    // would only leave them to it (at 64 clients, thousands of wake-ups a second). (Only
    // within the fill: beyond it no loop leaves them, and the snapshot copies the queue.)
    if (within && loops_.size() > 1 && leaves_to_a_fuller_loop(snapshot_locked(), -1, options_)) return job;
  }
  wake_.notify_all();
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
  spill_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    responder_stopping_ = true;
  }
  done_ready_.notify_all();
  for (std::thread& t : responders_) {
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
  erase_from_queue([&](const Waiting& w) { return w.job->stop_if_needed(now); });
}

void Scheduler::erase_from_queue(const std::function<bool(const Waiting&)>& drop) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!drop(it->second)) {
      ++it;
      continue;
    }
    fair_.dropped(it->second.job->tenant.id);
    it = queue_.erase(it);
  }
  queued_ = queue_.size();
}

const AdmissionSnapshot& Scheduler::snapshot_locked() {
  admission_.active_sentences = active_.load();
  admission_.queue.clear();  // keeps its capacity: no allocation once the queue has been this long
  for (const auto& [tag, w] : queue_) {
    admission_.queue.push_back({w.job->options.rows(), int64_t(w.job->source_ids[w.index].size())});
  }
  return admission_;
}

// *deferred: none, because this idle loop leaves them to a decoding one (loop_fill_sentences).
std::vector<Scheduler::Waiting> Scheduler::take_admissible(int index, int steps_since_admit,
                                                           Clock::time_point now, bool* deferred) {
  const DecodeLoop& loop = *loops_[size_t(index)];
  purge_queue(now);
  LoopLoad& own = admission_.loops[size_t(index)];
  own.sentences = loop.active_sentences();
  own.rows = loop.active_rows();
  const AdmissionDecision decision = decide_admission(snapshot_locked(), index, steps_since_admit, options_);
  *deferred = decision.defer;
  std::vector<Waiting> taken;
  taken.reserve(decision.admit);
  for (size_t i = 0; i < decision.admit; ++i) {
    const auto front = queue_.begin();
    own.sentences += 1;
    own.rows += front->second.job->options.rows();
    fair_.served(front->second.job->tenant.id, front->first.first);
    taken.push_back(std::move(front->second));
    queue_.erase(front);
  }
  queued_ = queue_.size();
  active_ += int(taken.size());  // under the lock: the other loops' shares count them at once
  return taken;
}

// An idle loop's wait: a short poll, then the condition variable (until `until`, when its
// engine's memory is to be trimmed then). False when stopping with nothing left to do.
// Only the loop that went idle last polls: the others sleep at once, so a lone request goes to
// the loop that just ran (one loop measured 0.2 ms faster than two alternating ones).
bool Scheduler::wait_for_work(std::unique_lock<std::mutex>& lock, int index, std::optional<Clock::time_point> until) {
  if (stopping_ && queue_.empty()) return false;
  if (index == last_idle_loop_) {
    ++spinning_;  // under the lock: submit() reads it to skip the wake-up
    lock.unlock();
    const Clock::time_point spin_until = Clock::now() + kIdleSpin;
    while (queued_.load() == 0 && Clock::now() < spin_until) std::this_thread::yield();
    lock.lock();
    --spinning_;
  }
  if (queue_.empty() && !stopping_) {
    if (until)
      wake_.wait_until(lock, *until);
    else
      wake_.wait(lock);
  }
  return true;
}

void Scheduler::run(int index) {
  DecodeLoop& loop = *loops_[size_t(index)];
  std::unordered_map<uint64_t, Running> running;
  uint64_t next_id = 0;
  int steps_since_admit = 0;
  bool stepped_since_idle = false;
  // An idle loop releases nothing more, so its engine would keep what its last sentences left
  // past use (Engine::memory_retention) until it works again: it trims once that has passed.
  bool worked = false;
  std::optional<Clock::time_point> trim_at;
  auto fail_running = [&](const Error& e) {
    for (auto& [id, r] : running) r.job->fail(e.code(), e.what());
    active_ -= int(running.size());
    running.clear();
  };
  while (true) {
    std::vector<Waiting> admitted;
    bool left_some = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      bool deferred = false;
      admitted = take_admissible(index, steps_since_admit, Clock::now(), &deferred);
      if (admitted.empty() && loop.idle()) {
        const Clock::time_point now = Clock::now();
        if (worked && loop.memory_retention().count() > 0) trim_at = now + loop.memory_retention();
        worked = false;
        if (trim_at && now >= *trim_at) {
          trim_at.reset();
          lock.unlock();
          loop.trim_idle_memory();
          if (hooks_.on_idle_trim) hooks_.on_idle_trim(index);
          continue;
        }
      } else {
        worked = true;
        trim_at.reset();
      }
      if (deferred) {
        spill_.wait_for(lock, kSpillRecheck);
        continue;
      }
      if (admitted.empty() && loop.idle()) {
        if (stepped_since_idle) {
          if (hooks_.on_step) hooks_.on_step(index, 0, 0, 0, 0, 0);  // went idle
          last_idle_loop_ = index;
        }
        stepped_since_idle = false;
        if (!wait_for_work(lock, index, trim_at)) return;
        continue;
      }
      left_some = !admitted.empty() && !queue_.empty();
    }
    // Lone requests that arrived while this loop polled woke nobody (submit() leaves them to
    // the poller); what it could not take goes to a sleeping loop now, not after its steps.
    if (left_some) {
      wake_.notify_one();
      spill_.notify_all();
    }
    // Admission: slots and rows now; the encode rides on the next step.
    if (!admitted.empty()) {
      const Clock::time_point now = Clock::now();
      std::vector<LoopSentence> sentences;
      std::unordered_map<Job*, double> waited;  // per job: its longest wait
      for (Waiting& w : admitted) {
        const uint64_t id = next_id++;
        sentences.push_back({id, w.job->source_ids[w.index], w.job->options});
        if (!w.job->glossary.empty()) sentences.back().options.glossary_phrases = w.job->glossary[w.index];
        running[id] = Running{w.job, w.index};
        double& longest = waited[w.job.get()];
        longest = std::max(longest, seconds_between(w.enqueued, now));
      }
      try {
        loop.admit(std::move(sentences));
      } catch (const Error& e) {  // take_admissible checked the room: cannot happen
        for (Waiting& w : admitted) w.job->fail(e.code(), e.what());
        for (uint64_t id = next_id - admitted.size(); id < next_id; ++id) running.erase(id);
        active_ -= int(admitted.size());
        continue;
      }
      for (const auto& [job, seconds] : waited) job->admitted(seconds, now);
      steps_since_admit = 0;
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
    StepReport report;
    try {
      report = loop.step();
    } catch (const Error& e) {
      fail_running(e);
      continue;
    } catch (const std::exception& e) {
      fail_running(Error(ErrorCode::kInternal, e.what()));
      continue;
    }
    // Sentences the loop shed (out of memory for their cache growth): their requests fail,
    // the loop's other sentences go on.
    for (const FailedSentence& f : report.failed) {
      auto it = running.find(f.id);
      if (it == running.end()) continue;
      it->second.job->fail(f.code, f.message);
      running.erase(it);
      --active_;
    }
    const Clock::time_point step_end = Clock::now();
    ++steps_since_admit;
    stepped_since_idle = true;
    if (hooks_.on_step) {
      hooks_.on_step(index, rows, sentences, report.encoded,
                     seconds_between(step_start, step_end) - report.encode_seconds, report.encode_seconds);
    }
    if (hooks_.on_first_step) {
      for (uint64_t id : report.first_step) {
        auto it = running.find(id);
        if (it != running.end()) hooks_.on_first_step(seconds_between(it->second.job->submitted, step_end));
      }
    }
    if (report.finished.empty()) continue;
    std::vector<Done> finished;
    bool answer_here = false;
    {
      // The load the other loops and submit() read drops with the finished sentences before
      // their requests are answered: a client's next request, judged against the load from
      // before, found no room here and woke an idle loop, and two loops came to share the
      // model's sentences.
      std::lock_guard<std::mutex> lock(mutex_);
      for (FinishedSentence& f : report.finished) {
        auto it = running.find(f.id);
        if (it == running.end()) continue;
        finished.push_back({it->second.job, it->second.index, std::move(f.translation), step_end, f.steps});
        running.erase(it);
        --active_;
      }
      admission_.loops[size_t(index)].sentences = loop.active_sentences();
      admission_.loops[size_t(index)].rows = loop.active_rows();
      // Nothing else to do here: spare a lone request the hand-over. This loop polls the
      // queue again once the answer is out, so it counts as polling already: a lone request
      // that arrives meanwhile (the client's next one) waits for it rather than waking a
      // sleeping loop. Woken, that loop took it, and a single client's requests alternated
      // between the engines, each time paying a sleeping thread's wake-up and a cold engine.
      answer_here = loop.idle() && queue_.empty();
      if (answer_here) {
        last_idle_loop_ = index;
        ++spinning_;
      }
    }
    if (answer_here) {
      answer(finished);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --spinning_;
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(done_mutex_);
      for (Done& d : finished) done_.push_back(std::move(d));
    }
    done_ready_.notify_one();
  }
}

// Answers finished sentences off the loop threads: detokenizing and completing a request
// (its callback fills and sends the response) must not delay the next decoder step.
void Scheduler::respond() {
  std::unique_lock<std::mutex> lock(done_mutex_);
  while (true) {
    done_ready_.wait(lock, [&] { return !done_.empty() || responder_stopping_; });
    if (done_.empty()) return;
    // Take a share: the other responders take the rest.
    std::vector<Done> batch;
    const size_t n = std::max<size_t>(1, done_.size() / kResponders);
    batch.assign(std::make_move_iterator(done_.begin()), std::make_move_iterator(done_.begin() + long(n)));
    done_.erase(done_.begin(), done_.begin() + long(n));
    if (!done_.empty()) done_ready_.notify_one();
    lock.unlock();
    answer(batch);  // jobs released outside the lock
    lock.lock();
  }
}

void Scheduler::answer(std::vector<Done>& finished) {
  for (Done& d : finished) {
    if (detokenize_) {
      for (Hypothesis& h : d.translation.hypotheses) h.text = detokenize_(h.ids);
    }
    d.job->complete(d.index, std::move(d.translation), d.steps, d.at);
  }
  finished.clear();
}

}  // namespace nmt::server
