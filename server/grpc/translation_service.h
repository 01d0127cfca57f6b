#pragma once
// The gRPC face of the server: the call state machines of Translate and TranslateStream on
// the completion queue, which take each request through the protocol-neutral
// RequestPipeline (server/pipeline/request_pipeline.h: admission, validation, submission,
// the response, the metrics and the log line). A waiting request holds no thread; a
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
#include "server/tenants/auth.h"
#include "server/pipeline/request_pipeline.h"
#include "server/repository/model_registry.h"

namespace nmt::server {

// Translate is registered raw (bytes in and out) and parsed here, so that a request that
// is not a TranslateRequest gets INVALID_ARGUMENT like any other bad input; the other two
// methods are typed.
using TranslationServiceBase = v1::TranslationService::WithRawMethod_Translate<
    v1::TranslationService::WithAsyncMethod_TranslateStream<v1::TranslationService::Service>>;

class TranslationService final : public TranslationServiceBase {
 public:
  // Requests go through `pipeline`, whose CallPermits (server.max_concurrent_calls) each
  // call and stream holds; beyond them a new one is refused RESOURCE_EXHAUSTED. A stream
  // stops reading while `max_stream_messages` of its messages are unanswered or unwritten
  // (server.max_stream_messages_in_flight). `auth` is the caller's, and may be reloaded
  // while the service runs. With `trust_tenant_header` (server.trust_tenant_header) a call's
  // x-tenant metadata names its tenant of fair queueing.
  TranslationService(RequestPipeline& pipeline, const ModelRegistry& models,
                     const BearerAuth& auth, int max_stream_messages = 64,
                     bool trust_tenant_header = false);

  // Once the server has started: offers Translate and TranslateStream calls places on
  // `queue` (the server's, taken by `threads` QueueThreads), which stay until the queue is
  // shut down and drained.
  void start(grpc::ServerCompletionQueue& queue, int threads);

  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  // Score (RequestPipeline::score) on the synchronous API: its handler thread waits for the
  // pairs' jobs. A scoring client (reranking, quality estimation) sends few large requests,
  // not the many small ones the asynchronous Translate path is built for.
  grpc::Status Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override;

  // Blocks until every Translate and TranslateStream call object is gone (a job's callback
  // may be the last to let go of one). Called once the queue is drained, before the models
  // stop: it orders the calls' last steps (a cancel into a scheduler, say) before that,
  // where ThreadSanitizer sees it too.
  void wait_for_calls();

 private:
  class UnaryCall;   // one Translate call, on the asynchronous API (translation_service.cc)
  class StreamCall;  // one TranslateStream call, on the asynchronous API (stream_call.cc)

  // Offers TranslateStream calls `places` places on the queue (stream_call.cc).
  void offer_stream_places(int places);

  void call_started() { live_.fetch_add(1, std::memory_order_relaxed); }
  void call_done();
  // OK, or UNAUTHENTICATED (recorded as one request of `method` under `traceparent`) when
  // the call lacks an accepted bearer token. When OK, `caller` (when given) is who the call
  // is: its key, or its peer, or its x-tenant (identify_caller).
  grpc::Status authenticate(const grpc::ServerContextBase& context, const char* method,
                            const std::string& traceparent, Caller* caller = nullptr);

  RequestPipeline& pipeline_;
  const ModelRegistry& models_;  // ListModels
  const BearerAuth& auth_;
  const size_t max_stream_messages_;
  const bool trust_tenant_header_;
  std::atomic<int> live_{0};   // UnaryCall (once arrived) and StreamCall objects not yet deleted
  std::mutex live_mutex_;
  std::condition_variable no_live_;
  grpc::ServerCompletionQueue* queue_ = nullptr;
};

// One model of ListModels (and of ModelControl's answers).
void fill_model_info(const ModelStatus& status, v1::ModelInfo* info);

}  // namespace nmt::server
