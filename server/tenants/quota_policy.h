#pragma once
// Per-key quotas (requests and characters per minute, server.auth_token_file's fields:
// api_keys.h) as a pure function of a key's state and the time, passed in: no clock, no
// threads (tables: tests/server/tenants/test_quota_policy.cc). Each quota is a token bucket
// holding up to one minute's allowance, refilled continuously at allowance/60 per second and
// full at first: a key may burst a minute's worth, then goes at its rate. A request is charged
// both quotas or neither; one that finds a bucket short is refused with the seconds after
// which it would pass.
#include <cstdint>
#include <string>

namespace nmt::server {

struct QuotaLimits {
  int64_t requests_per_minute = 0;    // 0 = none
  int64_t characters_per_minute = 0;  // 0 = none
  bool any() const { return requests_per_minute > 0 || characters_per_minute > 0; }
};

struct QuotaState {
  bool started = false;
  double at = 0;  // seconds of the last charge (the caller's clock)
  double requests = 0, characters = 0;  // what the buckets hold then
};

struct QuotaVerdict {
  bool allowed = true;
  std::string quota;          // when refused: "requests_per_minute" or "characters_per_minute"
  double retry_after = 0;     // when refused: seconds until the request would pass (inf: never)
  std::string message;        // when refused: names the quota, its limit and the wait
};

// Charges one request of `characters` at time `now` (seconds, non-decreasing per key) when
// both buckets hold enough; state is updated either way (refilled up to now).
QuotaVerdict charge_quota(QuotaState& state, const QuotaLimits& limits, int64_t characters, double now);

}  // namespace nmt::server
