#include "server/pipeline/status.h"

#include <algorithm>
#include <string>

namespace nmt::server {

grpc::StatusCode to_grpc_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case ErrorCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case ErrorCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case ErrorCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case ErrorCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::kInternal: return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::INTERNAL;
}

grpc::Status to_grpc_status(const Error& error) {
  return grpc::Status(to_grpc_code(error.code()), error.what());
}

const char* status_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

int retry_after_seconds(const grpc::Status& status) {
  const std::string& message = status.error_message();
  const std::string marker = "retry after ";
  const size_t at = message.rfind(marker);
  if (at == std::string::npos) return 1;
  int seconds = 0;
  for (size_t i = at + marker.size(); i < message.size() && message[i] >= '0' && message[i] <= '9'; ++i) {
    seconds = std::min(seconds * 10 + (message[i] - '0'), 86400);
  }
  return std::max(seconds, 1);
}

}  // namespace nmt::server
