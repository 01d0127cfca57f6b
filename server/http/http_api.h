#pragma once
// The HTTP/JSON face of the server (config http.port; off by default), on HttpFront
// (http_front.h: libmicrohttpd, no thread held by a slow client or a request in flight):
//   POST /v1/translate  a JSON nmt.v1.TranslateRequest (proto3 JSON mapping), answered with
//                       the JSON TranslateResponse, or {"error", "code"} with the HTTP
//                       status of the gRPC code (400, 401, 404, 429, 503, 504, 500)
//   POST /translate     LibreTranslate's API (server/http/libretranslate_api.h)
//   GET  /languages     LibreTranslate's list of languages of the served models
//   POST /translate_file, GET /download_file/NAME  LibreTranslate's documents (file_api.h)
// Requests go through the RequestPipeline the gRPC calls use (server/pipeline/): the same
// validation, limits (server.max_concurrent_calls, the queue), bearer tokens, metrics and
// log lines as gRPC.
// Every answer is also counted in nmt_http_requests_total{endpoint, status}, and carries the
// request's W3C traceparent (header `traceparent`: the client's when valid, else a fresh
// one; logged with the request id).
#include <memory>
#include <string>

#include "server/config/http_limits.h"
#include "server/documents/document_limits.h"
#include "server/http/file_api.h"
#include "server/http/http_front.h"
#include "server/http/libretranslate_api.h"
#include "server/observability/metrics.h"
#include "server/tenants/auth.h"
#include "server/pipeline/request_pipeline.h"
#include "server/repository/model_registry.h"

namespace nmt::server {

class HttpApi {
 public:
  // Binds host:port (throws std::runtime_error naming the address when it cannot) and serves
  // on its own threads within `limits`. Bodies over max_body_bytes are refused with 413.
  // With `trust_tenant_header` (server.trust_tenant_header) a request's x-tenant header names
  // its tenant of fair queueing, as gRPC's x-tenant metadata does (identify_caller). With
  // `trust_forwarded_headers` (server.trust_forwarded_headers) translatedFileUrl follows
  // X-Forwarded-Proto and X-Forwarded-Host (FileApi).
  HttpApi(const std::string& host, int port, const HttpLimits& limits, size_t max_body_bytes,
          RequestPipeline& pipeline, const ModelRegistry& models, const BearerAuth& auth,
          Metrics& metrics, bool trust_tenant_header = false,
          const DocumentLimits& documents = {}, bool trust_forwarded_headers = false);
  ~HttpApi();  // stop()
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Stops accepting connections, lets the requests being served finish (HttpFront::stop).
  // Idempotent.
  void stop();

 private:
  // Routes one request; `respond` gets its answer, at once or from the pipeline's completion.
  void handle(const HttpRequest& request, HttpFront::Respond respond);
  void v1_translate(const HttpRequest& request, const std::string& traceparent,
                    HttpFront::Respond respond);
  void v1_score(const HttpRequest& request, const std::string& traceparent, HttpFront::Respond respond);
  template <typename Message>
  bool read_v1(const HttpRequest& request, const char* endpoint, const std::string& traceparent,
               HttpFront::Respond& respond, Message* message);  // the token and the JSON body
  void libre_translate(const HttpRequest& request, const std::string& traceparent,
                       HttpFront::Respond respond);
  void libre_detect(const HttpRequest& request, const std::string& traceparent,
                    HttpFront::Respond respond);
  void libre_translate_file(const HttpRequest& request, const std::string& traceparent,
                            HttpFront::Respond respond);
  // The parsed LibreTranslate request once its API key passes (else LibreTranslateError),
  // and who sent it (fair queueing, quotas).
  LibreTranslateRequest libre_request(const HttpRequest& request, const char* method,
                                      const std::string& traceparent, Caller* caller) const;

  RequestPipeline& pipeline_;
  const BearerAuth& auth_;  // main's: SIGHUP reloads its tokens
  const LibreTranslateApi libretranslate_;
  FileApi files_;
  const size_t max_body_bytes_;
  const bool trust_tenant_header_;
  prometheus::Family<prometheus::Counter>& requests_;
  std::unique_ptr<HttpFront> front_;  // last: stopped first
};

}  // namespace nmt::server
