#include "server/grpc/call_context.h"

#include <chrono>

#include "server/observability/trace_context.h"

namespace nmt::server {

Clock::time_point steady_deadline(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto remaining = deadline - std::chrono::system_clock::now();
  if (remaining > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(remaining);
}

std::string call_traceparent(const grpc::ServerContextBase& context) {
  const auto found = context.client_metadata().find("traceparent");
  if (found == context.client_metadata().end()) return accept_traceparent({});
  return accept_traceparent(std::string(found->second.data(), found->second.size()));
}

}  // namespace nmt::server
