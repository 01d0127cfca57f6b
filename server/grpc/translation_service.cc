#include "server/grpc/translation_service.h"

#include <future>

#include "server/pipeline/status.h"

#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "server/grpc/queue_event.h"
#include "server/observability/trace_context.h"

namespace nmt::server {
namespace {

// The call's deadline on the steady clock (max() when the client set none).
Clock::time_point steady_deadline(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto remaining = deadline - std::chrono::system_clock::now();
  if (remaining > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(remaining);
}

// The call's W3C traceparent: the client's (metadata `traceparent`) when valid, else a
// fresh one (observability/trace_context.h).
std::string call_traceparent(const grpc::ServerContextBase& context) {
  const auto found = context.client_metadata().find("traceparent");
  if (found == context.client_metadata().end()) return accept_traceparent({});
  return accept_traceparent(std::string(found->second.data(), found->second.size()));
}

}  // namespace

// Translate: parsed, validated and submitted when the call arrives, or, when its model must
// load first, on the registry's loading thread once it has (no thread waits for the load);
// the job's callback (on a scheduler thread) fills the response and finishes the call. A
// client's cancellation or the deadline (the done event, IsCancelled) cancels the job, whose
// callback then finishes the call. The call is not finished before its admission has come
// back, and the object lives until the finish and the done events have come back and its
// finisher has returned from Finish() (event_back()), so it outlives every thread that
// touches it.
//
// Each call holds one requested place on the queue until a call arrives in it; it then
// requests the next, so the queue always offers as many places as it started with.
class TranslationService::UnaryCall final {
 public:
  // Requests the next Translate call on the service's queue.
  static void request(TranslationService& service) {
    grpc::ServerCompletionQueue* queue = service.queue_;
    auto* call = new UnaryCall(service);
    // Before the request: the done event then comes back once the call has arrived.
    call->context_.AsyncNotifyWhenDone(&call->done_event_);
    handoff(&call->arrived_event_);
    handoff(&call->done_event_);
    service.RequestTranslate(&call->context_, &call->request_bytes_, &call->responder_, queue,
                             queue, &call->arrived_event_);
  }

 private:
  explicit UnaryCall(TranslationService& service)
      : service_(service), permit_(service.pipeline_) {}

  // A call arrived in this place (ok), or the server is shutting down (not ok: no call
  // came, and no done event will).
  void on_arrival(bool ok) {
    if (!ok) {
      delete this;
      return;
    }
    request(service_);
    service_.call_started();
    deadline_ = steady_deadline(context_);
    traceparent_ = call_traceparent(context_);
    if (grpc::Status denied = service_.authenticate(context_, "Translate", traceparent_, &caller_);
        !denied.ok()) {
      finish_unrecorded(denied);
      return;
    }
    start();
  }

  void start() {
    const bool parsed =
        grpc::SerializationTraits<v1::TranslateRequest>::Deserialize(&request_bytes_, &request_).ok();
    // Nothing of a request that does not parse is trusted (its id included).
    record_ = service_.pipeline_.begin("Translate", parsed ? request_ : v1::TranslateRequest(),
                                       traceparent_);
    if (!parsed) {
      finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the request does not parse as an nmt.v1.TranslateRequest (a malformed "
                          "message, or a text that is not valid UTF-8)"));
      return;
    }
    if (!permit_.acquire()) {
      finish(permit_.busy());
      return;
    }
    service_.pipeline_.admit(
        request_, deadline_, record_, admitted_, [this](JobResult result) { done(result); },
        [this](std::shared_ptr<Job> job, const grpc::Status& refused) { admission(std::move(job), refused); },
        caller_);
  }

  // The call is over: answered, cancelled by its client or past its deadline.
  void on_end(bool) {
    if (context_.IsCancelled()) {
      // The job's callback then arrives CANCELLED (unless it already did) and finishes the
      // call, on this thread when the job had not started. Before the admission has come
      // back there is no job yet: admission() cancels it.
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        cancelled_ = true;
        job = job_;
      }
      if (job) admitted_.scheduler->cancel(job);
    }
    event_back();
  }
  void on_finish(bool) { event_back(); }
  // The finish and the done events both back, and the thread that finished the call out of
  // Finish(): nothing else holds the call.
  void event_back() {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    TranslationService& service = service_;
    delete this;
    service.call_done();
  }

  // The admission came back (here, or on the loading thread): the job, or why the request
  // is refused. A job that answered meanwhile left its answer for this to finish with.
  void admission(std::shared_ptr<Job> job, const grpc::Status& refused) {
    std::optional<grpc::Status> answer;
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      admitting_ = false;
      if (!refused.ok()) {
        answer = refused;
      } else {
        job_ = job;
        answer = std::move(answered_);
        cancel = cancelled_ && !answer;
      }
    }
    if (answer) {
      finish(*answer);
    } else if (cancel) {
      admitted_.scheduler->cancel(job);  // its callback may finish the call here
    }
  }

  void done(const JobResult& result) {
    grpc::Status status =
        service_.pipeline_.respond(admitted_, result, deadline_, record_, &response_);
    if (status.ok()) {
      bool own_buffer = false;
      status = grpc::SerializationTraits<v1::TranslateResponse>::Serialize(
          response_, &response_bytes_, &own_buffer);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (admitting_) {  // still inside the admission: admission() finishes the call
        answered_ = status;
        return;
      }
    }
    finish(status);
  }
  void finish(const grpc::Status& status) {
    context_.AddTrailingMetadata("x-request-id", record_.request_id);
    // As HTTP's Retry-After: how long a full share or a used-up quota asks the client to wait.
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      context_.AddTrailingMetadata("retry-after", std::to_string(retry_after_seconds(status)));
    }
    service_.pipeline_.record(record_, status);
    permit_.release();
    finish_unrecorded(status);
  }
  void finish_unrecorded(const grpc::Status& status) {
    context_.AddTrailingMetadata("traceparent", traceparent_);
    handoff(&finished_event_);
    if (status.ok()) {
      responder_.Finish(response_bytes_, status, &finished_event_);
    } else {
      responder_.FinishWithError(status, &finished_event_);
    }
    // The finish event may already be back: whichever comes last deletes the call.
    event_back();
  }

  TranslationService& service_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_bytes_;
  grpc::ByteBuffer response_bytes_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_{&context_};
  QueueEvent arrived_event_ = queue_event<UnaryCall, &UnaryCall::on_arrival>(this);
  QueueEvent done_event_ = queue_event<UnaryCall, &UnaryCall::on_end>(this);
  QueueEvent finished_event_ = queue_event<UnaryCall, &UnaryCall::on_finish>(this);
  std::atomic<int> events_left_{3};  // finished, done, and out of Finish()
  CallPermit permit_;
  RequestRecord record_;
  Clock::time_point deadline_;
  std::string traceparent_;  // echoed in the trailing metadata
  v1::TranslateRequest request_;
  AdmittedRequest admitted_;
  v1::TranslateResponse response_;
  std::mutex mutex_;  // guards what the admission, the job's callback and the done event share
  bool admitting_ = true;
  bool cancelled_ = false;
  std::optional<grpc::Status> answered_;  // the job's answer, while admitting_
  Caller caller_;  // who the call is (fair queueing, quotas)
  std::shared_ptr<Job> job_;  // once admitted; a cancellation cancels it
};

// TranslateStream: each message read is admitted at once (or answered with its error), so
// that messages read ahead decode together; answers are written in message order as they
// complete, each with its own status. Reading pauses while max_stream_messages_ messages
// are unanswered or unwritten: a client that stops reading its answers stalls their writes,
// and then the server's reads (flow control: what the client still sends waits in the
// stream's HTTP/2 window), instead of the server buffering without end. A failed write or
// the client's cancellation cancels every pending job, and the stream finishes CANCELLED
// once all their callbacks have come back.
//
// Threads: the queue's threads run the read, write and end events, the scheduler runs the
// job callbacks (holding nothing). State is guarded by mutex_; gRPC operations (Read, Write,
// Finish) are started by one thread at a time, the "actor" (pump()), never under mutex_.
// Finish is the actor's last act: nothing starts an operation after it, and no job callback
// is left to touch the call. The call lives until its end event and every operation it
// started have come back, and the actor is out of Finish() (events_left_).
class TranslationService::StreamCall final {
 public:
  // Requests the next TranslateStream call on the service's queue.
  static void request(TranslationService& service) {
    auto* call = new StreamCall(service);
    call->context_.AsyncNotifyWhenDone(&call->ended_event_);
    handoff(&call->arrived_event_);
    handoff(&call->ended_event_);
    service.RequestTranslateStream(&call->context_, &call->stream_, service.queue_,
                                   service.queue_, &call->arrived_event_);
  }

 private:
  explicit StreamCall(TranslationService& service)
      : service_(service), permit_(service.pipeline_) {}

  // A stream arrived in this place (ok), or the server is shutting down (not ok: no stream
  // came, and no end event will). The end event may come on another thread before or while
  // this runs (a client that cancels at once): the arrival is the stream's first actor
  // (acting_ starts set), so that the end event's pump leaves the stream to it.
  void on_arrival(bool ok) {
    if (!ok) {
      delete this;
      return;
    }
    request(service_);
    service_.call_started();
    deadline_ = steady_deadline(context_);
    // One traceparent for the stream and each of its messages, echoed in the initial
    // metadata (sent with the first answer, or the finish).
    traceparent_ = call_traceparent(context_);
    context_.AddInitialMetadata("traceparent", traceparent_);
    grpc::Status refused = service_.authenticate(context_, "TranslateStream", traceparent_, &caller_);
    if (refused.ok() && !permit_.acquire()) {
      refused = permit_.busy();
      service_.pipeline_.record_refused("TranslateStream", refused, traceparent_);
    }
    if (!refused.ok()) {
      end_stream(refused);  // acting_ stays set: nothing acts on a stream that never read
      return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    acting_ = false;
    pump(std::move(lock));
  }

  void on_read(bool ok) {
    read_done(ok);
    event_back();
  }
  void on_written(bool ok) {
    write_done(ok);
    event_back();
  }
  // The call is over: finished, or cancelled by its client or its deadline.
  void on_end(bool) {
    if (context_.IsCancelled()) cancel_all();
    event_back();
  }
  void on_finished(bool) { event_back(); }
  void event_back() {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    TranslationService& service = service_;
    delete this;
    service.call_done();
  }

 private:
  struct Entry {
    RequestRecord record;
    AdmittedRequest admitted;
    std::shared_ptr<Job> job;  // while its callback has not come back
    bool done = false;         // answered: `response` is final
    v1::TranslateStreamResponse response;
  };

  // A message, or the end of the client's messages (ok=false).
  void read_done(bool ok) {
    if (!ok) {  // the client half-closed, or the stream broke
      std::unique_lock<std::mutex> lock(mutex_);
      reading_ = false;
      read_done_ = true;
      pump(std::move(lock));
      return;
    }
    auto entry = std::make_shared<Entry>();
    entry->record = service_.pipeline_.begin("TranslateStream", request_, traceparent_);
    entry->response.set_request_id(entry->record.request_id);
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled = cancelled_;
      if (!cancelled) {
        pending_.push_back(entry);
        ++outstanding_;
        admitting_ = true;
      }
    }
    if (cancelled) {  // the stream is going away: recorded, and answered nowhere
      service_.pipeline_.record(entry->record,
                      grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed"));
      std::unique_lock<std::mutex> lock(mutex_);
      reading_ = false;
      pump(std::move(lock));
      return;
    }
    // Admitted here when the model is loaded, else on the loading thread once it is. Until
    // then reading_ stays set (request_ is in use, the next read waits) and admitting_
    // keeps a cancelled stream from finishing under the admission.
    service_.pipeline_.admit(
        request_, deadline_, entry->record, entry->admitted,
        [this, entry](JobResult result) { completed(*entry, result); },
        [this, entry](std::shared_ptr<Job> job, const grpc::Status& refused) {
          admission(entry, std::move(job), refused);
        },
        caller_);
  }

  // A message's admission came back: its job, or why it is refused.
  void admission(const std::shared_ptr<Entry>& entry, std::shared_ptr<Job> job,
                 const grpc::Status& refused) {
    if (!refused.ok()) {
      answer(*entry, refused);
      service_.pipeline_.record(entry->record, refused);
    }
    bool cancel = false;
    std::unique_lock<std::mutex> lock(mutex_);
    if (!refused.ok()) {
      entry->done = true;
      --outstanding_;
    } else if (!entry->done) {
      entry->job = job;
      cancel = cancelled_;  // OnCancel came while we were submitting
    }
    if (cancel) {
      // Its callback may run here; with reading_ and admitting_ still set its pump neither
      // reads nor finishes the stream under this function.
      lock.unlock();
      entry->admitted.scheduler->cancel(job);
      lock.lock();
    }
    reading_ = false;
    admitting_ = false;
    pump(std::move(lock));
  }

  void write_done(bool ok) {
    std::unique_lock<std::mutex> lock(mutex_);
    writing_ = false;
    if (ok) {
      pending_.pop_front();
      pump(std::move(lock));
      return;
    }
    lock.unlock();
    cancel_all();
  }

  static void answer(Entry& entry, const grpc::Status& status) {
    entry.response.set_status_code(status.error_code());
    entry.response.set_status_message(status.error_message());
  }

  // A job's callback: a scheduler thread, or the thread that cancelled the job.
  void completed(Entry& entry, const JobResult& result) {
    // Nobody else reads an entry before it is done.
    const grpc::Status status = service_.pipeline_.respond(
        entry.admitted, result, deadline_, entry.record, entry.response.mutable_response());
    if (!status.ok()) entry.response.clear_response();
    answer(entry, status);
    service_.pipeline_.record(entry.record, status);
    std::unique_lock<std::mutex> lock(mutex_);
    entry.done = true;
    entry.job.reset();
    --outstanding_;
    pump(std::move(lock));  // the last touch of the reactor unless this thread acts
  }

  void cancel_all() {
    std::vector<std::pair<Scheduler*, std::shared_ptr<Job>>> jobs;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!cancelled_) {
        cancelled_ = true;
        for (const auto& e : pending_) {
          if (!e->done && e->job) jobs.emplace_back(e->admitted.scheduler, e->job);
        }
      }
    }
    // Their callbacks may run here, on this thread.
    for (auto& [scheduler, job] : jobs) scheduler->cancel(job);
    pump(std::unique_lock<std::mutex>(mutex_));
  }

  // Starts what the state calls for. Called with mutex_ held; the first caller becomes the
  // actor and loops until nothing changed meanwhile; later callers leave it a note (dirty_).
  void pump(std::unique_lock<std::mutex> lock) {
    if (acting_) {
      dirty_ = true;
      return;
    }
    acting_ = true;
    while (true) {
      dirty_ = false;
      const v1::TranslateStreamResponse* write = nullptr;
      bool read = false;
      std::optional<grpc::Status> finish;
      if (cancelled_) {
        // Reads may be outstanding: they end (ok=false) once the call is finished.
        if (outstanding_ == 0 && !writing_ && !admitting_) {
          finish = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was closed");
        }
      } else {
        if (!writing_ && !pending_.empty() && pending_.front()->done) {
          writing_ = true;
          write = &pending_.front()->response;
        }
        if (!reading_ && !read_done_ && pending_.size() < service_.max_stream_messages_) {
          reading_ = true;
          read = true;
        }
        if (read_done_ && !reading_ && !writing_ && pending_.empty()) finish = grpc::Status::OK;
      }
      if (finish) {
        permit_.release();
        lock.unlock();
        end_stream(*finish);  // acting_ stays set: nothing starts after this
        return;
      }
      lock.unlock();
      if (write) {  // the entry stays at the front until its write is back
        events_left_.fetch_add(1, std::memory_order_relaxed);
        handoff(&written_event_);
        stream_.Write(*write, &written_event_);
      }
      if (read) {
        events_left_.fetch_add(1, std::memory_order_relaxed);
        handoff(&read_event_);
        stream_.Read(&request_, &read_event_);
      }
      lock.lock();
      if (!dirty_) {
        acting_ = false;
        return;
      }
    }
  }

  // The actor's last act (and the refusal's, which is its own actor).
  void end_stream(const grpc::Status& status) {
    events_left_.fetch_add(1, std::memory_order_relaxed);
    handoff(&finished_event_);
    stream_.Finish(status, &finished_event_);
    event_back();  // the actor's hold: the call may be gone after this
  }

  TranslationService& service_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<v1::TranslateStreamResponse, v1::TranslateRequest> stream_{&context_};
  QueueEvent arrived_event_ = queue_event<StreamCall, &StreamCall::on_arrival>(this);
  QueueEvent ended_event_ = queue_event<StreamCall, &StreamCall::on_end>(this);
  QueueEvent read_event_ = queue_event<StreamCall, &StreamCall::on_read>(this);
  QueueEvent written_event_ = queue_event<StreamCall, &StreamCall::on_written>(this);
  QueueEvent finished_event_ = queue_event<StreamCall, &StreamCall::on_finished>(this);
  // The end event, each operation in flight, and the actor's hold until Finish() is started.
  std::atomic<int> events_left_{2};
  CallPermit permit_;
  Caller caller_;  // who the stream is (fair queueing, quotas)
  Clock::time_point deadline_;
  std::string traceparent_;  // the stream's, for each of its messages
  v1::TranslateRequest request_;  // the read in flight

  std::mutex mutex_;
  std::deque<std::shared_ptr<Entry>> pending_;  // message order; the front is written next
  int outstanding_ = 0;   // pending entries whose job callback has not come back
  bool reading_ = false;  // a read in flight, or its event running, or its admission
  bool admitting_ = false;  // a message's admission has not come back
  bool read_done_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  // Set from the start: until the arrival has run, nothing may act. An end event taken off
  // the queue before the arrival (another thread took it first) would otherwise finish the
  // stream, and the arrival then finish it a second time (gRPC aborts the server:
  // GRPC_CALL_ERROR_TOO_MANY_OPERATIONS).
  bool acting_ = true;
  bool dirty_ = false;
};

TranslationService::TranslationService(RequestPipeline& pipeline, const ModelRegistry& models,
                                       const BearerAuth& auth, int max_stream_messages,
                                       bool trust_tenant_header)
    : pipeline_(pipeline), models_(models), auth_(auth),
      max_stream_messages_(static_cast<size_t>(max_stream_messages)),
      trust_tenant_header_(trust_tenant_header) {}

void TranslationService::call_done() {
  if (live_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard<std::mutex> lock(live_mutex_);
    no_live_.notify_all();
  }
}

void TranslationService::wait_for_calls() {
  std::unique_lock<std::mutex> lock(live_mutex_);
  no_live_.wait(lock, [this] { return live_.load(std::memory_order_acquire) == 0; });
}

grpc::Status TranslationService::authenticate(const grpc::ServerContextBase& context,
                                              const char* method,
                                              const std::string& traceparent, Caller* caller) {
  std::shared_ptr<const ApiKey> key = auth_.identify(context.client_metadata());
  if (key || !auth_.enabled()) {
    if (caller) {
      std::string tenant;
      if (trust_tenant_header_) {
        const auto it = context.client_metadata().find("x-tenant");
        if (it != context.client_metadata().end()) tenant.assign(it->second.data(), it->second.size());
      }
      *caller = identify_caller(std::move(key), context.peer(), tenant, trust_tenant_header_);
    }
    return grpc::Status::OK;
  }
  const grpc::Status status(grpc::StatusCode::UNAUTHENTICATED,
                            "missing or wrong bearer token (metadata 'authorization: Bearer TOKEN')");
  pipeline_.record_refused(method, status, traceparent);
  return status;
}

void TranslationService::start(grpc::ServerCompletionQueue& queue, int threads) {
  queue_ = &queue;
  // Places offered at once: enough that calls arriving together are taken without waiting
  // for a thread to request the next place. Streams come seldom and last.
  constexpr int kPlacesPerThread = 32;
  constexpr int kStreamPlaces = 8;
  for (int i = 0; i < kPlacesPerThread * threads; ++i) UnaryCall::request(*this);
  for (int i = 0; i < kStreamPlaces; ++i) StreamCall::request(*this);
}

grpc::Status TranslationService::ListModels(grpc::ServerContext* context, const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* response) {
  if (grpc::Status denied = authenticate(*context, "ListModels", call_traceparent(*context)); !denied.ok()) return denied;
  for (const ModelStatus& m : models_.list()) fill_model_info(m, response->add_models());
  return grpc::Status::OK;
}

grpc::Status TranslationService::Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                                       v1::ScoreResponse* response) {
  const std::string traceparent = call_traceparent(*context);
  context->AddTrailingMetadata("traceparent", traceparent);
  Caller caller;
  if (grpc::Status denied = authenticate(*context, "Score", traceparent, &caller); !denied.ok()) return denied;
  std::promise<grpc::Status> answered;
  pipeline_.score(
      "Score", *request, steady_deadline(*context),
      [&](const grpc::Status& status, v1::ScoreResponse r) {
        *response = std::move(r);
        answered.set_value(status);
      },
      std::move(caller), traceparent);
  return answered.get_future().get();
}

void fill_model_info(const ModelStatus& m, v1::ModelInfo* info) {
  info->set_name(m.name);
  info->set_device(m.device);
  info->set_precision(m.precision);
  info->set_is_default(m.is_default);
  info->set_vocab_size(m.vocab_size);
  info->set_state(model_state_name(m.state));
  info->set_reason(m.reason);
  for (const std::string& d : m.devices) info->add_devices(d);
  info->set_source_language(m.source_language);
  info->set_target_language(m.target_language);
  for (const std::string& code : m.languages) info->add_languages(code);
  info->set_memory_bytes(int64_t(m.memory_bytes));
}

}  // namespace nmt::server
