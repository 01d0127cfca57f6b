#include "server/tenants/quota_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nmt::server {
namespace {

// The bucket of a per-minute allowance, refilled to `now`.
void refill(double& bucket, int64_t per_minute, double elapsed) {
  if (per_minute <= 0) return;
  bucket = std::min(double(per_minute), bucket + elapsed * double(per_minute) / 60.0);
}

// Seconds until `bucket` holds `cost` of a per-minute allowance (inf when it never can).
double wait_for(double bucket, int64_t per_minute, double cost) {
  if (cost > double(per_minute)) return std::numeric_limits<double>::infinity();
  return (cost - bucket) * 60.0 / double(per_minute);
}

QuotaVerdict refuse(const char* quota, int64_t per_minute, double cost, double wait) {
  QuotaVerdict v;
  v.allowed = false;
  v.quota = quota;
  v.retry_after = wait;
  const std::string what = std::string("API key quota ") + quota + " (" + std::to_string(per_minute) +
                           ", server.auth_token_file)";
  if (std::isinf(wait)) {
    v.message = what + ": a request of " + std::to_string(int64_t(cost)) + " characters can never fit it";
  } else {
    v.message = what + " used up; retry after " + std::to_string(int64_t(std::ceil(wait - 1e-6))) + " s";
  }
  return v;
}

}  // namespace

QuotaVerdict charge_quota(QuotaState& state, const QuotaLimits& limits, int64_t characters, double now) {
  if (!state.started) {
    state.started = true;
    state.at = now;
    state.requests = double(limits.requests_per_minute);
    state.characters = double(limits.characters_per_minute);
  }
  const double elapsed = std::max(0.0, now - state.at);
  state.at = std::max(state.at, now);
  refill(state.requests, limits.requests_per_minute, elapsed);
  refill(state.characters, limits.characters_per_minute, elapsed);
  // A limit lowered by a reload takes effect at once.
  if (limits.requests_per_minute > 0) state.requests = std::min(state.requests, double(limits.requests_per_minute));
  if (limits.characters_per_minute > 0) {
    state.characters = std::min(state.characters, double(limits.characters_per_minute));
  }
  if (limits.requests_per_minute > 0 && state.requests < 1) {
    return refuse("requests_per_minute", limits.requests_per_minute, 1,
                  wait_for(state.requests, limits.requests_per_minute, 1));
  }
  if (limits.characters_per_minute > 0 && state.characters < double(characters)) {
    return refuse("characters_per_minute", limits.characters_per_minute, double(characters),
                  wait_for(state.characters, limits.characters_per_minute, double(characters)));
  }
  if (limits.requests_per_minute > 0) state.requests -= 1;
  if (limits.characters_per_minute > 0) state.characters -= double(characters);
  return {};
}

}  // namespace nmt::server
