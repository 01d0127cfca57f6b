#pragma once
// The per-key quotas of every API key (quota_policy.h's buckets behind one lock) and the
// per-key metrics: nmt_key_requests_total{key}, nmt_key_characters_total{key} and
// nmt_quota_refusals_total{key,quota}. The label is the key's name from the token file, or
// "other" for unnamed keys, "none" without authentication: never a token, so the series stay
// as few as the file's names.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/tenants/api_keys.h"
#include "server/tenants/quota_policy.h"

namespace nmt::server {

class Quotas {
 public:
  explicit Quotas(prometheus::Registry& registry);

  // One request of `characters` by `key` (null: authentication off) now: counted, and charged
  // to its quotas (the tenant's buckets: keys of one name share them). A reload that changes a
  // key's limits keeps what its buckets hold, within the new limits.
  QuotaVerdict charge(const ApiKey* key, int64_t characters);
  // The same at `now`, seconds of the caller's clock (tests).
  QuotaVerdict charge(const ApiKey* key, int64_t characters, double now);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& characters_;
  prometheus::Family<prometheus::Counter>& refusals_;
  const std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  std::mutex mutex_;
  std::unordered_map<std::string, QuotaState> states_;  // by ApiKey::tenant, keys with quotas
};

}  // namespace nmt::server
