#pragma once
// GET /metrics for Prometheus on its own port. cpp-httplib (Debian's libcpp-httplib-dev)
// parses each request and writes its answer; this class owns the connections.
//
// Why not httplib's own listen loop: it gives each connection a pool thread that blocks in
// recv() with a timeout per recv, so a client sending one byte a second holds a thread
// indefinitely and a few hundred such clients leave a scrape waiting behind them. Here no
// thread ever waits on a client: one epoll thread accepts, gathers each request head
// without blocking (at most max_head_bytes), hands the complete head to httplib's request
// processing over an in-memory stream, and sends the answer without blocking. Every
// connection has one deadline from its accept, head, answer and all; one that has not
// finished by then is closed (408 first when its head never completed). A slow client thus
// costs a socket and a small buffer for at most request_timeout, and a scrape is answered as
// soon as its own request has arrived, whatever the other connections do.
//
// (prometheus-cpp's exposer, civetweb, was dropped before this: its worker threads have
// ~100 KB stacks, OpenBLAS's static TLS takes ~60 KB of each, and a scrape overflowed.
// httplib's thread pool is not used here, and these threads keep the default stack.)
#include <functional>
#include <memory>
#include <string>

namespace nmt::server {

struct MetricsEndpointLimits {
  // From accept to the answer's last byte sent.
  double request_timeout_seconds = 5;
  // Open connections; accepting one more closes the oldest, so that a flood of idle
  // connections cannot keep a scraper out.
  int max_connections = 1024;
  // A request head (request line and headers) larger than this is answered 400.
  int max_head_bytes = 16384;
};

class MetricsEndpoint {
 public:
  // Binds host:port (port 0: any free port) and starts serving; `body` renders the page and
  // is called on the endpoint's thread. Throws std::runtime_error naming the address when
  // it cannot listen.
  MetricsEndpoint(const std::string& host, int port, std::function<std::string()> body,
                  MetricsEndpointLimits limits = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const;  // the bound port

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nmt::server
