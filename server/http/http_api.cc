#include "server/http/http_api.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "server/observability/trace_context.h"
#include "server/pipeline/status.h"
#include "server/web/web_page.h"

namespace nmt::server {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kV1 = "HTTP /v1/translate";
constexpr const char* kV1Score = "HTTP /v1/score";
constexpr const char* kLibre = "HTTP /translate";
constexpr const char* kDetect = "HTTP /detect";
constexpr const char* kFile = "HTTP /translate_file";
constexpr const char* kDownload = "/download_file/";

// google.rpc's mapping of status codes to HTTP (as gRPC-gateway and Cloud APIs use it).
int http_status(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::INVALID_ARGUMENT: return 400;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    default: return 500;
  }
}

// LibreTranslate's codes: 400 for any bad request (unknown model included), 429 "Slowdown",
// 500 otherwise; 503 while shutting down (LibreTranslate has none).
LibreTranslateError libretranslate_error(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND: return {400, status.error_message()};
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return {429, "Slowdown: " + status.error_message()};
    case grpc::StatusCode::UNAVAILABLE: return {503, status.error_message()};
    default: return {500, "Cannot translate text: " + status.error_message()};
  }
}

// An answer with a JSON body.
HttpAnswer json_answer(int status, std::string body) {
  HttpAnswer answer;
  answer.status = status;
  answer.body = std::move(body);
  return answer;
}

// LibreTranslate's answer to a translation the pipeline refused.
HttpAnswer libre_refusal(const grpc::Status& status) {
  const LibreTranslateError e = libretranslate_error(status);
  HttpAnswer refused = json_answer(e.status, LibreTranslateApi::error_json(e.message));
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    refused.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds(status)));
  }
  return refused;
}

HttpAnswer v1_error(const grpc::Status& status) {
  nlohmann::ordered_json body = {{"error", status.error_message()},
                                 {"code", status_code_name(status.error_code())}};
  HttpAnswer answer = json_answer(http_status(status.error_code()),
                                  body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    answer.headers.emplace_back("Retry-After", std::to_string(retry_after_seconds(status)));
  }
  return answer;
}

// LibreTranslate answers browsers: its CORS headers.
void allow_cross_origin(HttpAnswer& answer) {
  answer.headers.emplace_back("Access-Control-Allow-Origin", "*");
  answer.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type, traceparent");
  answer.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST");
}

// The web page's file at the request's path (server/web/), with the policy that keeps it
// from loading anything from elsewhere; re-checked on every load (no-cache), so that a new
// binary's page replaces the old.
HttpAnswer web_answer(const WebAsset& asset) {
  HttpAnswer answer;
  answer.content_type = std::string(asset.content_type);
  answer.body = std::string(asset.bytes);
  answer.headers.emplace_back("Content-Security-Policy", kWebPagePolicy);
  answer.headers.emplace_back("X-Content-Type-Options", "nosniff");
  answer.headers.emplace_back("Cache-Control", "no-cache");
  return answer;
}

bool is_json(const HttpRequest& req) { return req.header("content-type").rfind(kJson, 0) == 0; }

// Every model the registry lists, loaded or not (a repository model loads on its first
// request), as it stands when the API starts.
std::vector<LanguageModel> language_models(const ModelRegistry& models) {
  std::vector<LanguageModel> out;
  for (const ModelStatus& m : models.list()) {
    out.push_back({m.name, ModelLanguages{m.source_language, m.target_language, m.languages}});
  }
  return out;
}

}  // namespace

HttpApi::HttpApi(const std::string& host, int port, const HttpLimits& limits,
                 size_t max_body_bytes, RequestPipeline& pipeline, const ModelRegistry& models,
                 const BearerAuth& auth, Metrics& metrics, bool trust_tenant_header,
                 const DocumentLimits& documents, bool trust_forwarded_headers)
    : pipeline_(pipeline),
      auth_(auth),
      libretranslate_(language_models(models)),
      files_(pipeline, libretranslate_, documents, libre_refusal, trust_forwarded_headers),
      max_body_bytes_(max_body_bytes),
      trust_tenant_header_(trust_tenant_header),
      requests_(prometheus::BuildCounter()
                    .Name("nmt_http_requests_total")
                    .Help("Answers of the HTTP API (http.port) by endpoint and HTTP status; "
                          "translations also count in nmt_requests_total")
                    .Register(metrics.registry())),
      front_(std::make_unique<HttpFront>(
          host, port, limits, max_body_bytes,
          [this](const HttpRequest& request, HttpFront::Respond respond) {
            handle(request, std::move(respond));
          },
          &metrics.http_connections("api"))) {}

HttpApi::~HttpApi() { stop(); }

void HttpApi::stop() { front_->stop(); }

void HttpApi::handle(const HttpRequest& req, HttpFront::Respond respond) {
  const bool download = req.path.rfind(kDownload, 0) == 0;
  const bool libre = req.path == "/translate" || req.path == "/detect" || req.path == "/languages" ||
                     req.path == "/translate_file" || download;
  const WebAsset* page = req.method == "GET" || req.method == "HEAD" ? find_web_asset(req.path) : nullptr;
  const bool known = libre || req.path == "/v1/translate" || req.path == "/v1/score";
  // Every answer is counted, and carries the request's traceparent (and LibreTranslate's
  // CORS headers on its routes).
  const std::string traceparent = accept_traceparent(req.header("traceparent"));
  HttpFront::Respond answer = [this, libre, traceparent, respond = std::move(respond),
                               endpoint = download ? std::string("/download_file")  // no file names as labels
                                          : known  ? req.path
                                                   : std::string(page ? "page" : "other")](HttpAnswer a) {
    a.headers.emplace_back("traceparent", traceparent);
    if (libre) allow_cross_origin(a);
    requests_.Add({{"endpoint", endpoint}, {"status", std::to_string(a.status)}}).Increment();
    respond(std::move(a));
  };
  if (req.body_over_limit) {
    return answer(json_answer(413, LibreTranslateApi::error_json(
                                       "the request body is over " + std::to_string(max_body_bytes_) +
                                       " bytes (server.max_message_bytes)")));
  }
  if (req.method == "POST" && req.path == "/v1/translate") return v1_translate(req, traceparent, answer);
  if (req.method == "POST" && req.path == "/v1/score") return v1_score(req, traceparent, answer);
  if (req.method == "POST" && req.path == "/translate") return libre_translate(req, traceparent, answer);
  if (req.method == "POST" && req.path == "/detect") return libre_detect(req, traceparent, answer);
  if (req.method == "POST" && req.path == "/translate_file") return libre_translate_file(req, traceparent, answer);
  if ((req.method == "GET" || req.method == "HEAD") && download) return answer(files_.download(req));
  // HEAD: the same answer, whose body libmicrohttpd leaves out.
  if ((req.method == "GET" || req.method == "HEAD") && req.path == "/languages") {
    return answer(json_answer(200, libretranslate_.languages_json()));
  }
  if (page) return answer(web_answer(*page));
  // Browsers' preflight before a cross-origin request to LibreTranslate's routes: a POST,
  // or a GET /languages with a Content-Type header (the npm `libretranslate` client sends one).
  if (req.method == "OPTIONS" && libre) {
    return answer(json_answer(204, ""));
  }
  answer(json_answer(404, LibreTranslateApi::error_json(
                              "no such endpoint: " + req.method + " " + req.path +
                              " (GET / the web page, POST /v1/translate, POST /v1/score, POST /translate, POST /detect, "
                              "GET /languages, POST /translate_file, GET /download_file/NAME)")));
}

// A /v1 call's answer: the response's JSON mapping with its request id, or the error.
template <typename Response>
auto v1_answer(HttpFront::Respond respond) {
  return [respond = std::move(respond)](const grpc::Status& status, Response response) {
    if (!status.ok()) return respond(v1_error(status));
    std::string body;
    google::protobuf::util::MessageToJsonString(response, &body);
    HttpAnswer answer = json_answer(200, std::move(body));
    answer.headers.emplace_back("X-Request-Id", response.request_id());
    respond(std::move(answer));
  };
}

// A /v1 call's bearer token and its JSON body (the message's proto3 JSON mapping): false when
// either is refused, which is then recorded and answered.
template <typename Message>
bool HttpApi::read_v1(const HttpRequest& req, const char* endpoint, const std::string& traceparent,
                      HttpFront::Respond& respond, Message* request) {
  grpc::Status refused;
  if (!auth_.allows_header(req.header("authorization"))) {
    refused = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                           "missing or wrong bearer token (header 'Authorization: Bearer TOKEN')");
  } else {
    const auto parsed = google::protobuf::util::JsonStringToMessage(req.body, request);
    if (parsed.ok()) return true;
    refused = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the body is not a JSON " +
                                                                   Message::descriptor()->full_name() + ": " +
                                                                   parsed.ToString());
  }
  pipeline_.record_refused(endpoint, refused, traceparent);
  respond(v1_error(refused));
  return false;
}

void HttpApi::v1_translate(const HttpRequest& req, const std::string& traceparent,
                           HttpFront::Respond respond) {
  v1::TranslateRequest request;
  if (!read_v1(req, kV1, traceparent, respond, &request)) return;
  Caller caller = identify_caller(auth_.identify_header(req.header("authorization")), req.peer,
                                  req.header("x-tenant"), trust_tenant_header_);
  pipeline_.translate(
      kV1, std::move(request), Clock::time_point::max(),
      v1_answer<v1::TranslateResponse>(std::move(respond)),
      std::move(caller), traceparent);
}

// Score's JSON mapping (nmt.v1.ScoreRequest / ScoreResponse), as /v1/translate's.
void HttpApi::v1_score(const HttpRequest& req, const std::string& traceparent, HttpFront::Respond respond) {
  v1::ScoreRequest request;
  if (!read_v1(req, kV1Score, traceparent, respond, &request)) return;
  Caller caller = identify_caller(auth_.identify_header(req.header("authorization")), req.peer, "", false);
  pipeline_.score(
      kV1Score, std::move(request), Clock::time_point::max(),
      v1_answer<v1::ScoreResponse>(std::move(respond)),
      std::move(caller), traceparent);
}

// LibreTranslate's API keys are this server's bearer tokens (the api_key field, or an
// Authorization header): 400 without one, 403 with a wrong one, as LibreTranslate.
LibreTranslateRequest HttpApi::libre_request(const HttpRequest& req, const char* method,
                                             const std::string& traceparent, Caller* caller) const {
  LibreTranslateRequest request = libretranslate_.parse(is_json(req), req.body, req.form);
  std::string credential = req.header("authorization");
  if (!request.api_key.empty()) credential = "Bearer " + request.api_key;
  if (!auth_.allows_header(credential)) {
    const bool none = credential.empty();
    pipeline_.record_refused(method,
                             grpc::Status(grpc::StatusCode::UNAUTHENTICATED, none ? "no API key" : "invalid API key"),
                             traceparent);
    if (none) throw LibreTranslateError{400, "Please contact the server operator to get an API key (api_key)"};
    throw LibreTranslateError{403, "Invalid API key"};
  }
  *caller = identify_caller(auth_.identify_header(credential), req.peer, req.header("x-tenant"),
                            trust_tenant_header_);
  return request;
}

// LibreTranslate's language detection (CLD2): no model, nothing queued.
void HttpApi::libre_detect(const HttpRequest& req, const std::string& traceparent,
                           HttpFront::Respond respond) {
  try {
    Caller caller;
    const LibreTranslateRequest request = libre_request(req, kDetect, traceparent, &caller);
    respond(json_answer(200, libretranslate_.detect_json(request)));
  } catch (const LibreTranslateError& e) {
    respond(json_answer(e.status, LibreTranslateApi::error_json(e.message)));
  }
}

void HttpApi::libre_translate_file(const HttpRequest& req, const std::string& traceparent,
                                   HttpFront::Respond respond) {
  try {
    Caller caller;
    LibreTranslateRequest request = libre_request(req, kFile, traceparent, &caller);
    files_.translate_file(req, std::move(request), std::move(caller), traceparent, respond);
  } catch (const LibreTranslateError& e) {
    respond(json_answer(e.status, LibreTranslateApi::error_json(e.message)));
  }
}

void HttpApi::libre_translate(const HttpRequest& req, const std::string& traceparent,
                              HttpFront::Respond respond) {
  try {
    Caller caller;
    LibreTranslateRequest request = libre_request(req, kLibre, traceparent, &caller);
    libretranslate_.check(request);
    libretranslate_.detect_source(request);
    v1::TranslateRequest translation = libretranslate_.to_request(request);
    pipeline_.translate(
        kLibre, std::move(translation), Clock::time_point::max(),
        [this, request = std::move(request), respond](const grpc::Status& status,
                                                      v1::TranslateResponse response) {
          if (!status.ok()) return respond(libre_refusal(status));
          respond(json_answer(200, libretranslate_.response_json(request, response)));
        },
        std::move(caller), traceparent);
  } catch (const LibreTranslateError& e) {
    respond(json_answer(e.status, LibreTranslateApi::error_json(e.message)));
  }
}

}  // namespace nmt::server
