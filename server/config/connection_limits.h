#pragma once
// What one client connection and one stream may hold (config `server.*`, README "Connection
// and stream limits"): gRPC's HTTP/2 transport enforces the per-connection ones,
// TranslationService the per-stream one.
#include <grpcpp/server_builder.h>

namespace nmt::server {

struct ConnectionLimits {
  // Streams (calls) open at once on one connection; a compliant client queues the next one
  // until a stream ends (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
  int max_streams_per_connection = 1024;
  // Messages of one TranslateStream read and not yet answered-and-written: at this many the
  // server stops reading the stream, so a client that sends without reading its answers is
  // held back by flow control instead of filling the server's memory.
  int max_stream_messages_in_flight = 64;
  // A connection without a call for this long is sent GOAWAY and closed (0 = never).
  double max_connection_idle_seconds = 600;
  // A connection must finish its HTTP/2 (and TLS) handshake within this, else it is closed.
  double handshake_timeout_seconds = 10;
  // The server pings a connection after this long without traffic and closes it when the
  // ping is not answered within keepalive_timeout_seconds: a vanished or frozen client
  // frees its calls' places. 0 = the server never pings.
  double keepalive_time_seconds = 60;
  double keepalive_timeout_seconds = 20;
  // Client pings: one sooner than this after the previous one is a strike; a connection
  // with more than max_ping_strikes strikes gets GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings")
  // and is closed (0 strikes = never).
  double min_client_ping_interval_seconds = 10;
  int max_ping_strikes = 2;
};

// The channel arguments for the limits gRPC's transport enforces.
void apply_connection_limits(const ConnectionLimits& limits, grpc::ServerBuilder& builder);

}  // namespace nmt::server
