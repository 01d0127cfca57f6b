#include "server/grpc/translation_service.h"

#include <future>
#include <mutex>
#include <optional>

#include "server/grpc/call_context.h"
#include "server/grpc/queue_event.h"
#include "server/pipeline/status.h"

namespace nmt::server {

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
  offer_stream_places(kStreamPlaces);
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
