#include "server/config/connection_limits.h"

#include <grpc/grpc.h>

#include <algorithm>
#include <climits>
#include <cmath>

namespace nmt::server {
namespace {

// Milliseconds for a channel argument; 0 seconds means "never" where gRPC reads INT_MAX so.
int milliseconds(double seconds, bool zero_is_never = false) {
  if (zero_is_never && seconds == 0) return INT_MAX;
  return static_cast<int>(std::min<double>(INT_MAX, std::ceil(seconds * 1000)));
}

}  // namespace

void apply_connection_limits(const ConnectionLimits& limits, grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits.max_streams_per_connection);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             milliseconds(limits.max_connection_idle_seconds, true));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             milliseconds(limits.handshake_timeout_seconds));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             milliseconds(limits.keepalive_time_seconds, true));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             milliseconds(limits.keepalive_timeout_seconds));
  // Pings are judged by their interval alone, with or without calls in flight (gRPC's
  // default would also strike every ping of a connection without calls).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             milliseconds(limits.min_client_ping_interval_seconds));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, limits.max_ping_strikes);
}

}  // namespace nmt::server
