#include "server/observability/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace nmt::server {
namespace {

bool g_json = false;

}  // namespace

void setup_logging(const std::string& format, const std::string& level) {
  g_json = format == "json";
  auto logger = spdlog::stderr_logger_mt("nmt");
  // JSON: log_event renders `"msg":...,"field":...` and the pattern closes the object.
  logger->set_pattern(g_json ? R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l",%v})"
                             : "[%Y-%m-%d %H:%M:%S.%e] [%l] %v",
                      spdlog::pattern_time_type::utc);
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::trace);  // one line per request; never lose the last ones
  spdlog::set_default_logger(logger);
}

std::string render_event(bool json, const std::string& message, const nlohmann::ordered_json& fields) {
  if (json) {
    nlohmann::ordered_json object = {{"msg", message}};
    for (const auto& [key, value] : fields.items()) object[key] = value;
    const std::string text = object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    return text.substr(1, text.size() - 2);  // the pattern supplies the braces
  }
  std::string line = message;
  for (const auto& [key, value] : fields.items()) {
    // Strings with spaces are quoted so that each field stays one token.
    const bool bare = value.is_string() && value.get<std::string>().find(' ') == std::string::npos;
    line += " " + key + "=" + (bare ? value.get<std::string>() : value.dump());
  }
  return line;
}

void log_event(spdlog::level::level_enum level, const std::string& message,
               const nlohmann::ordered_json& fields) {
  spdlog::log(level, "{}", render_event(g_json, message, fields));
}

}  // namespace nmt::server
