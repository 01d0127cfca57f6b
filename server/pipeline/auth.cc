#include "server/pipeline/auth.h"

#include <fstream>
#include <memory>
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

std::vector<std::string> read_tokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read server.auth_token_file " + path);
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (!line.empty()) tokens.push_back(line);
  }
  if (tokens.empty()) throw std::runtime_error("server.auth_token_file " + path + " holds no token");
  return tokens;
}

}  // namespace

BearerAuth::BearerAuth(std::vector<std::string> tokens)
    : tokens_(std::make_shared<const Tokens>(std::move(tokens))) {}

BearerAuth BearerAuth::from_file(const std::string& path) {
  BearerAuth auth(read_tokens(path));
  auth.path_ = path;
  return auth;
}

size_t BearerAuth::reload() {
  if (path_.empty()) return 0;
  auto tokens = std::make_shared<const Tokens>(read_tokens(path_));
  const size_t count = tokens->size();
  std::atomic_store(&tokens_, std::shared_ptr<const Tokens>(std::move(tokens)));
  return count;
}

bool BearerAuth::allows_header(const std::string& authorization) const {
  const std::shared_ptr<const Tokens> tokens = current();
  return tokens->empty() || allows_header(*tokens, authorization);
}

bool BearerAuth::allows_header(const Tokens& tokens, const std::string& authorization) {
  const std::string scheme = "Bearer ";
  if (authorization.size() <= scheme.size() || authorization.compare(0, scheme.size(), scheme) != 0) {
    return false;
  }
  const std::string presented = trim(authorization.substr(scheme.size()));
  bool ok = false;
  for (const std::string& t : tokens) ok |= equal_constant_time(presented, t);
  return ok;
}

bool BearerAuth::allows(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  // One set of tokens for the whole call, whatever a reload does meanwhile.
  const std::shared_ptr<const Tokens> tokens = current();
  if (tokens->empty()) return true;
  const auto range = metadata.equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    if (allows_header(*tokens, std::string(it->second.data(), it->second.size()))) return true;
  }
  return false;
}

}  // namespace nmt::server
