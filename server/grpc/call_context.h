#pragma once
// What the gRPC calls (Translate, TranslateStream, Score) read from their ServerContext alike.

#include <grpcpp/server_context.h>

#include <string>

#include "server/scheduling/scheduler.h"

namespace nmt::server {

// The call's deadline on the steady clock (max() when the client set none).
Clock::time_point steady_deadline(const grpc::ServerContextBase& context);

// The call's W3C traceparent: the client's (metadata `traceparent`) when valid, else a
// fresh one (observability/trace_context.h).
std::string call_traceparent(const grpc::ServerContextBase& context);

}  // namespace nmt::server
