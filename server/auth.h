#pragma once
// Bearer-token authentication (config server.auth_token_file): a call to
// TranslationService must carry the metadata `authorization: Bearer <token>` with one of the
// accepted tokens, else it is answered UNAUTHENTICATED. Health checks and reflection stay
// open (probes carry no secrets).
#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

namespace nmt::server {

class BearerAuth {
 public:
  // No tokens = every call is allowed.
  explicit BearerAuth(std::vector<std::string> tokens = {}) : tokens_(std::move(tokens)) {}
  // One token per line; blank lines and surrounding whitespace ignored. Throws
  // std::runtime_error naming the file when it cannot be read or holds no token.
  static BearerAuth from_file(const std::string& path);

  bool enabled() const { return !tokens_.empty(); }
  // The call's metadata carries an accepted token (always true when disabled). Tokens are
  // compared in time independent of where they differ.
  bool allows(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  bool allows_header(const std::string& authorization) const;

 private:
  std::vector<std::string> tokens_;
};

}  // namespace nmt::server
