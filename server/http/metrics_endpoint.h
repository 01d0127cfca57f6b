#pragma once
// GET /metrics for Prometheus on its own port (server.metrics_host:metrics_port), on the same
// HTTP front as the HTTP API (http_front.h, libmicrohttpd): one epoll thread reads every
// connection, so a client trickling its request costs a socket and a small buffer, never a
// thread, and a scrape is answered as soon as its own request has arrived, whatever the other
// connections do. The bounds are HttpFront's (HttpLimits), with the values of
// metrics_endpoint_limits() below (README, "TLS and authentication").
//
// (prometheus-cpp's exposer, civetweb, was dropped before this: its worker threads have
// ~100 KB stacks, OpenBLAS's static TLS takes ~60 KB of each, and a scrape overflowed;
// libmicrohttpd's threads keep the default stack.)
#include <functional>
#include <memory>
#include <string>

#include <prometheus/gauge.h>

#include "server/config/http_limits.h"
#include "server/http/http_front.h"

namespace nmt::server {

// The bounds of the /metrics port: a connection's request must be in within 5 s of its
// opening (else 408, closed), at most 1024 connections and 64 from one peer address (one
// more is closed at once: a flood from one address cannot keep a scraper at another out),
// one thread.
HttpLimits metrics_endpoint_limits();

class MetricsEndpoint {
 public:
  // Binds host:port (port 0: any free port) and starts serving; `body` renders the page and
  // is called on the endpoint's thread. `connections`, when given, follows the open
  // connections. Throws std::runtime_error naming the address when it cannot listen.
  MetricsEndpoint(const std::string& host, int port, std::function<std::string()> body,
                  const HttpLimits& limits = metrics_endpoint_limits(),
                  prometheus::Gauge* connections = nullptr);

  int port() const { return front_.port(); }

 private:
  HttpFront front_;
};

}  // namespace nmt::server
