#pragma once
// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a request
// brings in an HTTP header or gRPC metadata, "VERSION-TRACEID-PARENTID-FLAGS" in lowercase
// hex. The server logs it with the request id on the request's log line and echoes it in
// the answer, so that an operator can follow one request across a proxy, this server and
// its caller. A missing or malformed one is never an error: the request gets a fresh one.
#include <string>

namespace nmt::server {

// Whether `header` is a traceparent the specification lets a receiver use: version 2 hex
// digits other than "ff"; for version 00 exactly 55 characters, for a later version at
// least 55 with anything after the flags starting with '-'; a trace id of 32 and a parent
// id of 16 lowercase hex digits, neither all zeros; flags 2 hex digits.
bool valid_traceparent(const std::string& header);

// `header` when it is valid, else a fresh version-00 traceparent (random trace and parent
// ids, flags 00: not sampled).
std::string accept_traceparent(const std::string& header);

}  // namespace nmt::server
