#pragma once
// The lines of server.auth_token_file: one API key (bearer token) a line, with optional
// fields after it, separated by spaces:
//
//   TOKEN [name=NAME] [weight=W] [requests_per_minute=R] [characters_per_minute=C]
//
// name: the key's label in metrics and its identity for fair queueing and quotas (keys of one
// name share them, so an old and a new token of a rotation count as one client); without one
// the key is its own tenant and its metrics fold into the label "other". weight (1-1000, 1):
// its share of the queue and of admissions (server/scheduling/fair_queue.h). The quotas
// (0 = none; LibreTranslate's request and character limits): per minute, as a token bucket
// (quota_policy.h). Blank lines and surrounding whitespace are ignored.
#include <cstdint>
#include <string>
#include <vector>

namespace nmt::server {

struct ApiKey {
  std::string token;
  std::string name;  // empty: unnamed
  int weight = 1;
  int64_t requests_per_minute = 0;    // 0 = no quota
  int64_t characters_per_minute = 0;  // 0 = no quota
  // Fair queueing's and the quotas' identity: "key:NAME", or for an unnamed key one made from
  // its line (never shown: the token must not reach a log or a metric).
  std::string tenant;
  // Its metrics label: the name, or "other".
  const std::string& label() const;
};

// Parses the file's text; `path` names it in errors. Throws std::runtime_error naming the
// file, the line and the field for a malformed field, and when the file holds no key.
std::vector<ApiKey> parse_api_keys(const std::string& text, const std::string& path);

}  // namespace nmt::server
