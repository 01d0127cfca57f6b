#pragma once
// The one exception type of the engine. The code tells the server which gRPC status to map
// it to; the message is shown to users as is, so it names the file, field or option at fault.
#include <stdexcept>
#include <string>

namespace nmt {

enum class ErrorCode {
  kInvalidArgument,    // bad request or bad model file
  kNotFound,           // missing model, file or tensor
  kResourceExhausted,  // out of device memory, queue full
  kCancelled,
  kDeadlineExceeded,
  kUnavailable,        // shutting down
  kInternal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace nmt
