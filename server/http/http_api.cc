#include "server/http/http_api.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "server/pipeline/status.h"

namespace nmt::server {
namespace {

// Threads serving connections: each holds its connection while the translation runs, so
// this bounds the HTTP requests in translation at once (server.max_concurrent_calls
// bounds them with the gRPC calls); further connections wait for a thread.
constexpr size_t kThreads = 32;
constexpr time_t kKeepAliveSeconds = 2;  // an idle kept-alive connection holds a thread
constexpr time_t kReadWriteSeconds = 30;
constexpr const char* kJson = "application/json";
constexpr const char* kV1 = "HTTP /v1/translate";
constexpr const char* kLibre = "HTTP /translate";

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

void reply(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, kJson);
}

void v1_error(httplib::Response& res, const grpc::Status& status) {
  nlohmann::ordered_json body = {{"error", status.error_message()},
                                 {"code", status_code_name(status.error_code())}};
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    res.set_header("Retry-After", std::to_string(retry_after_seconds(status)));
  }
  reply(res, http_status(status.error_code()),
        body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

// LibreTranslate answers browsers: its CORS headers.
void allow_cross_origin(httplib::Response& res) {
  res.set_header("Access-Control-Allow-Origin", "*");
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
  res.set_header("Access-Control-Allow-Methods", "GET, POST");
}

bool is_json(const httplib::Request& req) {
  return req.get_header_value("Content-Type").rfind(kJson, 0) == 0;
}

// The first value of each form field, url-encoded or multipart.
std::map<std::string, std::string> form_fields(const httplib::Request& req) {
  std::map<std::string, std::string> fields;
  for (const auto& [name, value] : req.params) fields.emplace(name, value);
  for (const auto& [name, file] : req.files) fields.emplace(name, file.content);
  return fields;
}

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

HttpApi::HttpApi(const std::string& host, int port, size_t max_body_bytes,
                 RequestPipeline& pipeline, const ModelRegistry& models, const BearerAuth& auth,
                 Metrics& metrics)
    : pipeline_(pipeline),
      auth_(auth),
      libretranslate_(language_models(models)),
      max_body_bytes_(max_body_bytes),
      requests_(prometheus::BuildCounter()
                    .Name("nmt_http_requests_total")
                    .Help("Answers of the HTTP API (http.port) by endpoint and HTTP status; "
                          "translations also count in nmt_requests_total")
                    .Register(metrics.registry())),
      server_(std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  server_->set_keep_alive_timeout(kKeepAliveSeconds);
  server_->set_read_timeout(kReadWriteSeconds);
  server_->set_write_timeout(kReadWriteSeconds);
  server_->set_payload_max_length(max_body_bytes);
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second
  // server bind the same port (and share its connections) instead of failing at start.
  server_->set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  routes();
  if (!server_->bind_to_port(host, port)) {
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

HttpApi::~HttpApi() { stop(); }

void HttpApi::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

grpc::Status HttpApi::translate(const char* method, v1::TranslateRequest request,
                                v1::TranslateResponse* response, Caller caller) {
  using Answer = std::pair<grpc::Status, v1::TranslateResponse>;
  // Shared with the completion, which may still be inside set_value when get() returns.
  auto answer = std::make_shared<std::promise<Answer>>();
  std::future<Answer> answered = answer->get_future();
  pipeline_.translate(method, std::move(request), Clock::time_point::max(),
                      [answer](const grpc::Status& status, v1::TranslateResponse translated) {
                        answer->set_value({status, std::move(translated)});
                      },
                      std::move(caller));
  Answer got = answered.get();
  *response = std::move(got.second);
  return got.first;
}

void HttpApi::routes() {
  server_->Post("/v1/translate", [this](const httplib::Request& req, httplib::Response& res) {
    if (!auth_.allows_header(req.get_header_value("Authorization"))) {
      const grpc::Status denied(
          grpc::StatusCode::UNAUTHENTICATED,
          "missing or wrong bearer token (header 'Authorization: Bearer TOKEN')");
      pipeline_.record_refused(kV1, denied);
      return v1_error(res, denied);
    }
    v1::TranslateRequest request;
    const auto parsed = google::protobuf::util::JsonStringToMessage(req.body, &request);
    if (!parsed.ok()) {
      const grpc::Status bad(
          grpc::StatusCode::INVALID_ARGUMENT,
          "the body is not a JSON nmt.v1.TranslateRequest: " + parsed.ToString());
      pipeline_.record_refused(kV1, bad);
      return v1_error(res, bad);
    }
    v1::TranslateResponse response;
    const grpc::Status status =
        translate(kV1, std::move(request), &response,
                  identify_caller(auth_.identify_header(req.get_header_value("Authorization")), req.remote_addr,
                                  "", false));
    if (!status.ok()) return v1_error(res, status);
    std::string body;
    google::protobuf::util::MessageToJsonString(response, &body);
    res.set_header("X-Request-Id", response.request_id());
    reply(res, 200, body);
  });

  server_->Post("/translate", [this](const httplib::Request& req, httplib::Response& res) {
    allow_cross_origin(res);
    try {
      LibreTranslateRequest request =
          libretranslate_.parse(is_json(req), req.body, form_fields(req));
      // LibreTranslate's API keys are this server's bearer tokens (the api_key field, or an
      // Authorization header): 400 without one, 403 with a wrong one, as LibreTranslate.
      std::string credential = req.get_header_value("Authorization");
      if (!request.api_key.empty()) credential = "Bearer " + request.api_key;
      if (!auth_.allows_header(credential)) {
        const bool none = credential.empty();
        pipeline_.record_refused(kLibre, grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                                     none ? "no API key" : "invalid API key"));
        if (none) {
          throw LibreTranslateError{
              400, "Please contact the server operator to get an API key (api_key)"};
        }
        throw LibreTranslateError{403, "Invalid API key"};
      }
      libretranslate_.check(request);
      v1::TranslateResponse response;
      const grpc::Status status =
          translate(kLibre, libretranslate_.to_request(request), &response,
                    identify_caller(auth_.identify_header(credential), req.remote_addr, "", false));
      if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        res.set_header("Retry-After", std::to_string(retry_after_seconds(status)));
      }
      if (!status.ok()) throw libretranslate_error(status);
      reply(res, 200, libretranslate_.response_json(request, response));
    } catch (const LibreTranslateError& e) {
      reply(res, e.status, LibreTranslateApi::error_json(e.message));
    }
  });

  server_->Get("/languages", [this](const httplib::Request&, httplib::Response& res) {
    allow_cross_origin(res);
    reply(res, 200, libretranslate_.languages_json());
  });
  // Browsers' preflight before a cross-origin POST /translate.
  server_->Options("/translate", [](const httplib::Request&, httplib::Response& res) {
    allow_cross_origin(res);
    res.status = 204;
  });

  // Errors httplib answers itself (unknown path, a body over the limit, a bad request
  // line) get a JSON body too; a handler's own error body is kept.
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "HTTP status " + std::to_string(res.status);
        if (res.status == 413) {
          message = "the request body is over " + std::to_string(max_body_bytes_) +
                    " bytes (server.max_message_bytes)";
        } else if (res.status == 404) {
          message = "no such endpoint: " + req.method + " " + req.path +
                    " (POST /v1/translate, POST /translate, GET /languages)";
        }
        res.set_content(LibreTranslateApi::error_json(message), kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const bool known =
        req.path == "/v1/translate" || req.path == "/translate" || req.path == "/languages";
    requests_
        .Add({{"endpoint", known ? req.path : "other"}, {"status", std::to_string(res.status)}})
        .Increment();
  });
}

}  // namespace nmt::server
