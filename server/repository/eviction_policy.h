#pragma once
// Which loaded repository models to unload so that a load fits model_repository's memory
// budget (docs/server.md), as a pure function of plain state: the bytes the load needs and the
// bytes in use on each device, and the loaded models with their sizes, last use and whether
// they may go (tested as tables: tests/server/repository/test_eviction_policy.cc). The registry takes
// the snapshot under its lock, unloads what the plan names and looks again: a version still
// held by a request frees its memory only once it is let go.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nmt::server {

using DeviceBytes = std::map<std::string, size_t>;  // "cpu" | "cuda:N" -> bytes

// A loaded model, as the choice sees it.
struct EvictionCandidate {
  std::string name;
  DeviceBytes bytes;       // its replicas' memory, per device
  uint64_t last_used = 0;  // the registry's clock: larger = more recent
  bool pinned = false;     // never unloaded for another (a `models:` entry, or the one loading)
  bool in_use = false;     // sentences in flight: it may go once idle, not now
};

struct EvictionPlan {
  std::vector<std::string> evict;  // least recently used first
  // Devices still over the budget once those are gone (empty: the load fits), and the models
  // in use there (a later look may find them idle).
  std::vector<std::string> over;
  std::vector<std::string> busy;
};

// The least recently used idle, unpinned models with memory on a device that is over the
// budget, one after another until `need` fits beside `used` on every device of `need`
// (`used` counts every candidate's bytes, and any other memory the budget covers).
EvictionPlan plan_eviction(const DeviceBytes& need, const DeviceBytes& used, size_t budget,
                           const std::vector<EvictionCandidate>& candidates);

}  // namespace nmt::server
