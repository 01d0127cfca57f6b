#pragma once
// nmt::Error codes as gRPC statuses, and the status names used in logs and metric labels.
#include <grpcpp/support/status.h>

#include <string>

#include "model/error.h"

namespace nmt::server {

grpc::StatusCode to_grpc_code(ErrorCode code);
grpc::Status to_grpc_status(const Error& error);
// "OK", "INVALID_ARGUMENT", ... as in the gRPC documentation.
const char* status_code_name(grpc::StatusCode code);

// The seconds a RESOURCE_EXHAUSTED refusal asks the client to wait (HTTP's Retry-After): the
// "retry after N s" its message names (an API key's quota), else 1 (a full queue or share,
// which the decode loops drain within about a second).
int retry_after_seconds(const grpc::Status& status);

}  // namespace nmt::server
