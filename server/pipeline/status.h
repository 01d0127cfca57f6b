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

}  // namespace nmt::server
