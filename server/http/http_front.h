#pragma once
// The HTTP/1.1 server under the HTTP API (http_api.h), on GNU libmicrohttpd (Debian's
// libmicrohttpd-dev; README "Libraries" says why): http.threads threads, each an epoll loop
// over its share of the connections, so that reading a request never holds a thread and a
// client that trickles its request costs a socket and a small buffer, not a worker.
//
// What a client may hold (HttpLimits, config http.*): connections in all and per peer
// address (one more is closed at once: libmicrohttpd's CONNECTION_LIMIT and
// PER_IP_CONNECTION_LIMIT), a deadline for the request line and headers from the
// connection's opening (or, kept alive, from the previous answer) and one for the body
// from the headers (408, then closed: the watchdog below), and an idle limit for a
// connection that sends nothing, kept-alive ones between requests included (libmicrohttpd's
// CONNECTION_TIMEOUT).
//
// A complete request goes to the Handler on the connection's thread; the handler answers
// it through Respond, at once or later from any thread (a translation's completion), and
// meanwhile the connection is suspended: no thread waits on a request in flight.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/gauge.h>

#include "server/config/http_limits.h"

namespace nmt::server {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query
  std::string peer;  // the client's address (numeric, no port): its tenant when auth is off
  std::map<std::string, std::string> headers;  // lowercase names, the first value of each
  std::string body;                            // empty when body_over_limit
  bool body_over_limit = false;                // over max_body_bytes: answer 413
  // The first value of each field of the query, and of a url-encoded or multipart body.
  std::map<std::string, std::string> form;
  // The file name a multipart field carried (its Content-Disposition `filename`), by field.
  std::map<std::string, std::string> form_filenames;

  std::string header(const std::string& lowercase_name) const;
};

struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpFront {
 public:
  // Sends the answer; called exactly once per request, on any thread.
  using Respond = std::function<void(HttpAnswer)>;
  // `request` lives while the handler runs.
  using Handler = std::function<void(const HttpRequest& request, Respond respond)>;

  // Binds host:port (port 0: any free port) and starts serving (throws std::runtime_error
  // naming the address when it cannot listen). Bodies over max_body_bytes are not kept
  // (body_over_limit). `connections`, when given, follows the open connections.
  HttpFront(const std::string& host, int port, const HttpLimits& limits, size_t max_body_bytes,
            Handler handler, prometheus::Gauge* connections = nullptr);
  ~HttpFront();  // stop()
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Stops accepting connections, lets every request handed to the handler be answered and
  // end (sent, or closed by the idle limit), then closes every connection. Idempotent.
  void stop();

  int port() const;  // the bound port

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nmt::server
