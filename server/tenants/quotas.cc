#include "server/tenants/quotas.h"

namespace nmt::server {

Quotas::Quotas(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("nmt_key_requests_total")
                    .Help("Translate requests per API key (its name in the token file; other: unnamed keys)")
                    .Register(registry)),
      characters_(prometheus::BuildCounter()
                      .Name("nmt_key_characters_total")
                      .Help("Characters of the texts of the requests per API key")
                      .Register(registry)),
      refusals_(prometheus::BuildCounter()
                    .Name("nmt_quota_refusals_total")
                    .Help("Requests refused RESOURCE_EXHAUSTED by an API key's quota")
                    .Register(registry)) {}

QuotaVerdict Quotas::charge(const ApiKey* key, int64_t characters) {
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
  return charge(key, characters, now);
}

QuotaVerdict Quotas::charge(const ApiKey* key, int64_t characters, double now) {
  static const std::string none = "none";
  const std::string& label = key ? key->label() : none;
  QuotaVerdict verdict;
  const QuotaLimits limits = key ? QuotaLimits{key->requests_per_minute, key->characters_per_minute} : QuotaLimits{};
  if (limits.any()) {
    std::lock_guard<std::mutex> lock(mutex_);
    verdict = charge_quota(states_[key->tenant], limits, characters, now);
  }
  if (!verdict.allowed) {
    refusals_.Add({{"key", label}, {"quota", verdict.quota}}).Increment();
    return verdict;
  }
  requests_.Add({{"key", label}}).Increment();
  characters_.Add({{"key", label}}).Increment(double(characters));
  return verdict;
}

}  // namespace nmt::server
