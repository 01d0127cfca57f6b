#include "server/tenants/auth.h"

#include <fstream>
#include <memory>
#include <sstream>
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

std::vector<ApiKey> read_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read server.auth_token_file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_api_keys(text.str(), path);
}

}  // namespace

BearerAuth::BearerAuth(std::vector<std::string> tokens) : tokens_(std::make_shared<const Tokens>()) {
  Tokens keys;
  for (std::string& t : tokens) {
    ApiKey key;
    key.tenant = "token:" + std::to_string(keys.size() + 1);
    key.token = std::move(t);
    keys.push_back(std::move(key));
  }
  tokens_ = std::make_shared<const Tokens>(std::move(keys));
}

BearerAuth::BearerAuth(Tokens keys, std::string path)
    : path_(std::move(path)), tokens_(std::make_shared<const Tokens>(std::move(keys))) {}

BearerAuth BearerAuth::from_file(const std::string& path) { return BearerAuth(read_keys(path), path); }

size_t BearerAuth::reload() {
  if (path_.empty()) return 0;
  auto tokens = std::make_shared<const Tokens>(read_keys(path_));
  const size_t count = tokens->size();
  std::atomic_store(&tokens_, std::shared_ptr<const Tokens>(std::move(tokens)));
  return count;
}

bool BearerAuth::allows_header(const std::string& authorization) const {
  const std::shared_ptr<const Tokens> tokens = current();
  return tokens->empty() || find(*tokens, authorization) != nullptr;
}

// Every token is compared (in constant time each), so the time does not say which one matched.
const ApiKey* BearerAuth::find(const Tokens& tokens, const std::string& authorization) {
  const std::string scheme = "Bearer ";
  if (authorization.size() <= scheme.size() || authorization.compare(0, scheme.size(), scheme) != 0) {
    return nullptr;
  }
  const std::string presented = trim(authorization.substr(scheme.size()));
  const ApiKey* found = nullptr;
  for (const ApiKey& k : tokens) {
    if (equal_constant_time(presented, k.token) && !found) found = &k;
  }
  return found;
}

bool BearerAuth::allows(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  if (current()->empty()) return true;
  return identify(metadata) != nullptr;
}

std::shared_ptr<const ApiKey> BearerAuth::identify_header(const std::string& authorization) const {
  std::shared_ptr<const Tokens> tokens = current();
  const ApiKey* key = find(*tokens, authorization);
  if (!key) return nullptr;
  return std::shared_ptr<const ApiKey>(std::move(tokens), key);  // holds the whole set
}

std::shared_ptr<const ApiKey> BearerAuth::identify(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  // One set of tokens for the whole call, whatever a reload does meanwhile.
  std::shared_ptr<const Tokens> tokens = current();
  const auto range = metadata.equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    const ApiKey* key = find(*tokens, std::string(it->second.data(), it->second.size()));
    if (key) return std::shared_ptr<const ApiKey>(tokens, key);
  }
  return nullptr;
}

}  // namespace nmt::server
