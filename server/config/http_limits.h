#pragma once
// What the HTTP API's clients may hold (config `http.*`, README "HTTP connection limits");
// server/http/http_front.h enforces them, for /metrics too (metrics_endpoint_limits()).
// Apart from connection_limits.h, the gRPC transport's, which includes gRPC's ServerBuilder
// to apply them: the HTTP front, which never touches gRPC, includes this alone.
namespace nmt::server {

struct HttpLimits {
  // Open connections in all; one more is closed at once (after accept).
  int max_connections = 1024;
  // Open connections from one peer address; one more from it is closed at once, the other
  // addresses are not touched. Behind a proxy every client shares its address: raise it.
  int max_connections_per_address = 64;
  // A request's line and headers must have arrived within this of the connection's opening
  // (or, kept alive, of the previous answer), else 408 and closed.
  double header_timeout_seconds = 10;
  // Its body must have arrived within this of its headers, else 408 and closed.
  double body_timeout_seconds = 30;
  // A connection that sends nothing for this long (a kept-alive one between requests
  // included) is closed. Whole seconds (libmicrohttpd's resolution), at least 1.
  int idle_timeout_seconds = 5;
  // Threads reading and answering connections (each its own epoll loop); none waits on a
  // client or a translation.
  int threads = 2;
};

}  // namespace nmt::server
