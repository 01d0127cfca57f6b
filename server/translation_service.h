#pragma once
// The gRPC face of the server: a thin layer that validates (RequestValidator), queues
// (Batcher via ModelRegistry), waits, fills the response, and records one metrics update
// and one log line per request.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "nmt/v1/translation.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request_validator.h"

namespace nmt::server {

class TranslationService final : public v1::TranslationService::Service {
 public:
  TranslationService(ModelRegistry& models, const Limits& limits, Metrics& metrics,
                     BearerAuth auth = BearerAuth());

  grpc::Status Translate(grpc::ServerContext* context, const v1::TranslateRequest* request,
                         v1::TranslateResponse* response) override;
  grpc::Status TranslateStream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::TranslateStreamResponse, v1::TranslateRequest>* stream) override;
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;

 private:
  struct Call;      // one request's bookkeeping, receipt to log line
  struct Admitted;  // a validated request queued in its model's batcher

  Call begin(const char* method, const v1::TranslateRequest& request);
  Admitted admit(const v1::TranslateRequest& request, Clock::time_point deadline, Call& call);
  void respond(const Admitted& admitted, const JobResult& result, Call& call,
               v1::TranslateResponse* response);
  // Waits for the admitted request and fills the response; returns the request's status.
  grpc::Status complete(grpc::ServerContext* context, const Admitted& admitted, Call& call,
                        v1::TranslateResponse* response);
  void record(const Call& call, const grpc::Status& status);
  // OK, or UNAUTHENTICATED (recorded as one request of `method`) when the call lacks an
  // accepted bearer token.
  grpc::Status authenticate(grpc::ServerContext* context, const char* method);

  ModelRegistry& models_;
  RequestValidator validator_;
  Metrics& metrics_;
  const BearerAuth auth_;
  const std::string id_prefix_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace nmt::server
