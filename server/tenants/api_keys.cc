#include "server/tenants/api_keys.h"

#include <cctype>
#include <sstream>
#include <stdexcept>

namespace nmt::server {
namespace {

int64_t to_count(const std::string& value, int64_t lo, int64_t hi, const std::string& where) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || n < lo || n > hi) {
    throw std::runtime_error(where + ": expected an integer from " + std::to_string(lo) + " to " +
                             std::to_string(hi) + ", got '" + value + "'");
  }
  return n;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

const std::string& ApiKey::label() const {
  static const std::string other = "other";
  return name.empty() ? other : name;
}

std::vector<ApiKey> parse_api_keys(const std::string& text, const std::string& path) {
  std::vector<ApiKey> keys;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    ApiKey key;
    if (!(fields >> key.token)) continue;  // blank
    const std::string where = "server.auth_token_file " + path + " line " + std::to_string(number);
    std::string field;
    while (fields >> field) {
      const size_t eq = field.find('=');
      const std::string name = field.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : field.substr(eq + 1);
      const std::string at = where + " " + name;
      if (eq == std::string::npos) {
        throw std::runtime_error(where + ": expected NAME=VALUE after the token, got '" + field +
                                 "' (name, weight, requests_per_minute, characters_per_minute)");
      } else if (name == "name") {
        if (!valid_name(value)) {
          throw std::runtime_error(at + ": 1-64 letters, digits, '-', '_' or '.', got '" + value + "'");
        }
        key.name = value;
      } else if (name == "weight") {
        key.weight = int(to_count(value, 1, 1000, at));
      } else if (name == "requests_per_minute") {
        key.requests_per_minute = to_count(value, 0, int64_t(1) << 40, at);
      } else if (name == "characters_per_minute") {
        key.characters_per_minute = to_count(value, 0, int64_t(1) << 40, at);
      } else {
        throw std::runtime_error(where + ": unknown field '" + name +
                                 "' (name, weight, requests_per_minute, characters_per_minute)");
      }
    }
    key.tenant = key.name.empty() ? "line:" + std::to_string(number) : "key:" + key.name;
    keys.push_back(std::move(key));
  }
  if (keys.empty()) throw std::runtime_error("server.auth_token_file " + path + " holds no token");
  return keys;
}

}  // namespace nmt::server
