#pragma once
// Logging through spdlog to stderr: "text" lines ("message key=value ...") or "json" lines
// (one object per line: time, level, msg and the fields), as server.log_format says.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <string>

namespace nmt::server {

// format: text | json; level: trace | debug | info | warn | error | critical | off.
void setup_logging(const std::string& format, const std::string& level);

// One event with structured fields (a JSON object).
void log_event(spdlog::level::level_enum level, const std::string& message,
               const nlohmann::ordered_json& fields = nlohmann::ordered_json::object());

// The rendering of log_event's message and fields, without time and level (tests).
std::string render_event(bool json, const std::string& message, const nlohmann::ordered_json& fields);

}  // namespace nmt::server
