#pragma once
// The HTTP/JSON face of the server (config http.port; off by default), on cpp-httplib:
//   POST /v1/translate  a JSON nmt.v1.TranslateRequest (proto3 JSON mapping), answered with
//                       the JSON TranslateResponse, or {"error", "code"} with the HTTP
//                       status of the gRPC code (400, 401, 404, 429, 503, 504, 500)
//   POST /translate     LibreTranslate's API (server/http/libretranslate_api.h)
//   GET  /languages     LibreTranslate's list of languages of the served models
// Requests go through the RequestPipeline the gRPC calls use (server/pipeline/): the same
// validation, limits (server.max_concurrent_calls, the queue), bearer tokens, metrics and
// log lines as gRPC.
// Every answer is also counted in nmt_http_requests_total{endpoint, status}.
#include <memory>
#include <string>
#include <thread>

#include "server/http/libretranslate_api.h"
#include "server/observability/metrics.h"
#include "server/pipeline/auth.h"
#include "server/pipeline/request_pipeline.h"
#include "server/repository/model_registry.h"

namespace httplib {
class Server;
}

namespace nmt::server {

class HttpApi {
 public:
  // Binds host:port (throws std::runtime_error naming the address when it cannot) and serves
  // on its own threads. Bodies over max_body_bytes are refused with 413.
  HttpApi(const std::string& host, int port, size_t max_body_bytes, RequestPipeline& pipeline,
          const ModelRegistry& models, const BearerAuth& auth, Metrics& metrics);
  ~HttpApi();  // stop()
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Stops accepting connections, lets the requests being served finish, joins the threads.
  // Idempotent.
  void stop();

 private:
  void routes();
  // The pipeline's answer to `request` from `caller`, waited for on the connection's thread
  // (an httplib handler answers before it returns).
  grpc::Status translate(const char* method, v1::TranslateRequest request,
                         v1::TranslateResponse* response, Caller caller);

  RequestPipeline& pipeline_;
  const BearerAuth& auth_;  // main's: SIGHUP reloads its tokens
  const LibreTranslateApi libretranslate_;
  const size_t max_body_bytes_;
  prometheus::Family<prometheus::Counter>& requests_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace nmt::server
