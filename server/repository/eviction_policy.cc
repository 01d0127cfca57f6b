#include "server/repository/eviction_policy.h"

#include <algorithm>

namespace nmt::server {
namespace {

bool on_any(const EvictionCandidate& c, const std::vector<std::string>& devices) {
  for (const auto& [device, bytes] : c.bytes) {
    if (std::find(devices.begin(), devices.end(), device) != devices.end()) return true;
  }
  return false;
}

}  // namespace

EvictionPlan plan_eviction(const DeviceBytes& need, const DeviceBytes& used, size_t budget,
                           const std::vector<EvictionCandidate>& candidates) {
  EvictionPlan plan;
  DeviceBytes left = used;
  std::vector<bool> gone(candidates.size(), false);
  while (true) {
    plan.over.clear();
    for (const auto& [device, bytes] : need) {
      auto u = left.find(device);
      if ((u == left.end() ? 0 : u->second) + bytes > budget) plan.over.push_back(device);
    }
    if (plan.over.empty()) return plan;
    // The least recently used of those that may go and hold memory where it is short.
    const EvictionCandidate* victim = nullptr;
    size_t victim_index = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const EvictionCandidate& c = candidates[i];
      if (gone[i] || c.pinned || c.in_use || !on_any(c, plan.over)) continue;
      if (!victim || c.last_used < victim->last_used) {
        victim = &c;
        victim_index = i;
      }
    }
    if (!victim) break;
    gone[victim_index] = true;
    plan.evict.push_back(victim->name);
    for (const auto& [device, bytes] : victim->bytes) {
      size_t& u = left[device];
      u -= std::min(u, bytes);
    }
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const EvictionCandidate& c = candidates[i];
    if (!gone[i] && !c.pinned && c.in_use && on_any(c, plan.over)) plan.busy.push_back(c.name);
  }
  return plan;
}

}  // namespace nmt::server
