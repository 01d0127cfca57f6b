#include "server/auth.h"

#include <fstream>
#include <stdexcept>

namespace nmt::server {
namespace {

std::string trim(const std::string& s) {
  const char* space = " \t\r\n";
  const size_t b = s.find_first_not_of(space);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>(a.empty() ? 0 : a[i % a.size()]) ^
            static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

}  // namespace

BearerAuth BearerAuth::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read server.auth_token_file " + path);
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (!line.empty()) tokens.push_back(line);
  }
  if (tokens.empty()) throw std::runtime_error("server.auth_token_file " + path + " holds no token");
  return BearerAuth(std::move(tokens));
}

bool BearerAuth::allows_header(const std::string& authorization) const {
  if (!enabled()) return true;
  const std::string scheme = "Bearer ";
  if (authorization.size() <= scheme.size() || authorization.compare(0, scheme.size(), scheme) != 0) {
    return false;
  }
  const std::string presented = trim(authorization.substr(scheme.size()));
  bool ok = false;
  for (const std::string& t : tokens_) ok |= equal_constant_time(presented, t);
  return ok;
}

bool BearerAuth::allows(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  if (!enabled()) return true;
  const auto range = metadata.equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    if (allows_header(std::string(it->second.data(), it->second.size()))) return true;
  }
  return false;
}

}  // namespace nmt::server
