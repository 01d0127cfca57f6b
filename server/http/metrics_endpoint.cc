#include "server/http/metrics_endpoint.h"

#include <utility>

namespace nmt::server {
namespace {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

HttpAnswer text(int status, std::string body) {
  HttpAnswer answer;
  answer.status = status;
  answer.content_type = "text/plain";
  answer.body = std::move(body);
  return answer;
}

// GET (and HEAD: libmicrohttpd sends the headers alone) of /metrics, without a body.
HttpAnswer answer(const HttpRequest& request, const std::function<std::string()>& body) {
  if (request.path != "/metrics") return text(404, "only GET /metrics is served here\n");
  if (request.method != "GET" && request.method != "HEAD") {
    HttpAnswer refused = text(405, "only GET /metrics is served here\n");
    refused.headers.emplace_back("Allow", "GET, HEAD");
    return refused;
  }
  const std::string length = request.header("content-length");
  if (request.body_over_limit || !request.body.empty() || !request.header("transfer-encoding").empty() ||
      (!length.empty() && length != "0")) {
    return text(400, "GET /metrics takes no request body\n");
  }
  HttpAnswer page;
  page.content_type = kContentType;
  page.body = body();
  return page;
}

}  // namespace

HttpLimits metrics_endpoint_limits() {
  HttpLimits limits;
  limits.max_connections = 1024;
  limits.max_connections_per_address = 64;
  limits.header_timeout_seconds = 5;
  limits.body_timeout_seconds = 5;
  limits.idle_timeout_seconds = 5;
  limits.threads = 1;
  return limits;
}

MetricsEndpoint::MetricsEndpoint(const std::string& host, int port, std::function<std::string()> body,
                                 const HttpLimits& limits, prometheus::Gauge* connections)
    : front_(host, port, limits, /*max_body_bytes=*/0,
             [body = std::move(body)](const HttpRequest& request, HttpFront::Respond respond) {
               respond(answer(request, body));
             },
             connections) {}

}  // namespace nmt::server
