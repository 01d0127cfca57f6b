#pragma once
// The gRPC face of the server: a thin layer that validates (RequestValidator), submits to
// its model's Scheduler, fills the response when the job's callback arrives, and records
// one metrics update and one log line per request. A waiting request holds no thread; a
// client's cancellation arrives as an event and cancels its job.
//
// Translate and TranslateStream are served on gRPC's asynchronous API, on the server's
// completion queue, whose few threads (server/grpc/queue_threads.h) parse, validate, tokenize and
// submit each call and start its answer, never waiting on one; ListModels, a quick look, is
// synchronous. Not the callback API: with Debian's gRPC 1.51 (epoll1) a callback call's
// events go through gRPC's pool of "nexting" threads (half the cores, 8 on 16), which pass
// the socket poller from one to the next as they go, and which wait on the poller beside the
// queue's threads even while no callback call comes (queue_threads.h says what that costs).
// On H200 machines of 16 cores, 256 single-sentence clients (a connection each) were served
// at 72-80% of the engine's offline batch 256 on the callback API, at 77-97% on the
// asynchronous API with 4 threads (server run 37).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nmt/v1/translation.grpc.pb.h"
#include "server/grpc/auth.h"
#include "server/observability/metrics.h"
#include "server/pipeline/request_validator.h"
#include "server/repository/model_registry.h"

namespace nmt::server {

// Translate is registered raw (bytes in and out) and parsed here, so that a request that
// is not a TranslateRequest gets INVALID_ARGUMENT like any other bad input; the other two
// methods are typed.
using TranslationServiceBase = v1::TranslationService::WithRawMethod_Translate<
    v1::TranslationService::WithAsyncMethod_TranslateStream<v1::TranslationService::Service>>;

class TranslationService final : public TranslationServiceBase {
 public:
  // At most `max_concurrent_calls` Translate calls and streams at once
  // (server.max_concurrent_calls); beyond it a new one is refused RESOURCE_EXHAUSTED. A
  // stream stops reading while `max_stream_messages` of its messages are unanswered or
  // unwritten (server.max_stream_messages_in_flight).
  // `auth` is the caller's, and may be reloaded while the service runs.
  TranslationService(ModelRegistry& models, const Limits& limits, Metrics& metrics,
                     const BearerAuth& auth, int max_concurrent_calls = 4096,
                     int max_stream_messages = 64);

  // Once the server has started: offers Translate and TranslateStream calls places on
  // `queue` (the server's, taken by `threads` QueueThreads), which stay until the queue is
  // shut down and drained.
  void start(grpc::ServerCompletionQueue& queue, int threads);

  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;

  // One Translate request that came over another protocol (the HTTP API): admitted,
  // limited (a place among max_concurrent_calls), measured and logged like a gRPC call,
  // under `method` in the log. Blocks until it is answered; the caller authenticated it.
  grpc::Status translate(const char* method, const v1::TranslateRequest& request,
                         Clock::time_point deadline, v1::TranslateResponse* response);
  // Counts and logs a request refused before translate() (authentication, a body that
  // does not parse) as one request of `method`.
  void record_refused(const char* method, const grpc::Status& status);

  // Blocks until every Translate and TranslateStream call object is gone (a job's callback
  // may be the last to let go of one). Called once the queue is drained, before the models
  // stop: it orders the calls' last steps (a cancel into a scheduler, say) before that,
  // where ThreadSanitizer sees it too.
  void wait_for_calls();

 private:
  struct Call;      // one request's bookkeeping, receipt to log line
  struct Admitted;  // a validated request and its model
  class Slot;       // a place among max_concurrent_calls, and the inflight gauge
  class UnaryCall;  // one Translate call, on the asynchronous API
  class StreamCall;  // one TranslateStream call, on the asynchronous API

  Call begin(const char* method, const v1::TranslateRequest& request);
  // Validates the request and resolves its model into `admitted` (everything the job's
  // callback needs), then submits it; `done` may run before this returns. Throws
  // nmt::Error (the request is refused; `done` never runs).
  std::shared_ptr<Job> admit(const v1::TranslateRequest& request, Clock::time_point deadline,
                             Call& call, Admitted& admitted, JobCallback done);
  // admit() without waiting for a model load (ModelRegistry::acquire_async): `then` gets
  // the job, or the status that refuses the request (and `done` never runs). `then` runs on
  // this thread when the model is loaded, else on the registry's loading thread; `request`,
  // `call` and `admitted` must live until it has run.
  using Admission = std::function<void(std::shared_ptr<Job>, grpc::Status)>;
  void admit_async(const v1::TranslateRequest& request, Clock::time_point deadline, Call& call,
                   Admitted& admitted, JobCallback done, Admission then);
  // admit()'s work once the model is known.
  std::shared_ptr<Job> submit(const v1::TranslateRequest& request, std::shared_ptr<ServedModel> model,
                              Clock::time_point deadline, Call& call, Admitted& admitted,
                              JobCallback done);
  // The request's status from its job's result; fills the response when it is OK.
  grpc::Status respond(const Admitted& admitted, const JobResult& result,
                       Clock::time_point deadline, Call& call, v1::TranslateResponse* response);
  void record(const Call& call, const grpc::Status& status);
  void call_started() { live_.fetch_add(1, std::memory_order_relaxed); }
  void call_done();
  // OK, or UNAUTHENTICATED (recorded as one request of `method`) when the call lacks an
  // accepted bearer token.
  grpc::Status authenticate(const grpc::ServerContextBase& context, const char* method);

  ModelRegistry& models_;
  RequestValidator validator_;
  Metrics& metrics_;
  const BearerAuth& auth_;
  const std::string id_prefix_;
  std::atomic<uint64_t> next_id_{1};
  const int max_calls_;
  const size_t max_stream_messages_;
  std::atomic<int> calls_{0};  // Translate calls and streams holding a Slot
  std::atomic<int> live_{0};   // UnaryCall (once arrived) and StreamCall objects not yet deleted
  std::mutex live_mutex_;
  std::condition_variable no_live_;
  grpc::ServerCompletionQueue* queue_ = nullptr;
};

// One model of ListModels (and of ModelControl's answers).
void fill_model_info(const ModelStatus& status, v1::ModelInfo* info);

}  // namespace nmt::server
