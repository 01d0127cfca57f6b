#pragma once
// Bearer-token authentication (config server.auth_token_file): a call to
// TranslationService must carry the metadata `authorization: Bearer <token>` with one of the
// accepted tokens, else it is answered UNAUTHENTICATED. Health checks and reflection stay
// open (probes carry no secrets). The token file is read again on reload() (nmt-server: on
// SIGHUP), so tokens rotate without a restart. Each line is an API key with optional fields
// (a name, a weight, quotas: server/tenants/api_keys.h); identify() says which key a call
// carries.
#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/tenants/api_keys.h"

namespace nmt::server {

class BearerAuth {
 public:
  // No tokens = every call is allowed.
  explicit BearerAuth(std::vector<std::string> tokens = {});
  // One key per line (api_keys.h); blank lines and surrounding whitespace ignored. Throws
  // std::runtime_error naming the file when it cannot be read, holds no token or a line is
  // malformed (naming the line and the field).
  static BearerAuth from_file(const std::string& path);

  // Reads the token file again and accepts its tokens from then on (calls in flight keep
  // the verdict they had); returns how many it holds. Throws std::runtime_error as
  // from_file, and then the tokens accepted so far stay as they were. Safe while other
  // threads check calls. A BearerAuth not made from a file has nothing to reload: 0.
  size_t reload();

  bool enabled() const { return !current()->empty(); }
  // The call's metadata carries an accepted token (always true when disabled). Tokens are
  // compared in time independent of where they differ.
  bool allows(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  bool allows_header(const std::string& authorization) const;
  // The accepted key the call's metadata (or an Authorization header) carries; null when none
  // does, or when authentication is off. The key stays valid for as long as it is held,
  // whatever a reload does meanwhile.
  std::shared_ptr<const ApiKey> identify(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  std::shared_ptr<const ApiKey> identify_header(const std::string& authorization) const;

 private:
  using Tokens = std::vector<ApiKey>;
  BearerAuth(Tokens keys, std::string path);
  std::shared_ptr<const Tokens> current() const { return std::atomic_load(&tokens_); }
  static const ApiKey* find(const Tokens& tokens, const std::string& authorization);

  std::string path_;  // the token file, when made from one
  std::shared_ptr<const Tokens> tokens_;  // replaced whole on reload (atomic_load/store)
};

}  // namespace nmt::server
