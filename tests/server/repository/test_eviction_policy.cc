// The LRU choice of the model registry (server/repository/eviction_policy.h) as a table:
// the load's need, the memory in use, the loaded models; which go, and what is left over.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/repository/eviction_policy.h"

using namespace nmt::server;

namespace {

EvictionCandidate model(const std::string& name, DeviceBytes bytes, uint64_t last_used, bool in_use = false,
                        bool pinned = false) {
  return {name, std::move(bytes), last_used, pinned, in_use};
}

// `used` as the registry computes it: the candidates' bytes plus `other` (versions still
// held by a request, which no eviction frees now).
DeviceBytes used_by(const std::vector<EvictionCandidate>& models, const DeviceBytes& other = {}) {
  DeviceBytes used = other;
  for (const EvictionCandidate& m : models) {
    for (const auto& [device, bytes] : m.bytes) used[device] += bytes;
  }
  return used;
}

struct Row {
  std::string name;
  DeviceBytes need;
  std::vector<EvictionCandidate> models;
  DeviceBytes other;  // memory in use beyond the candidates'
  std::vector<std::string> evict, over, busy;
};

}  // namespace

TEST(EvictionPolicy, TheLeastRecentlyUsedIdleModelsGoUntilTheLoadFits) {
  const size_t budget = 100;
  const std::vector<Row> rows = {
      {"it fits: nothing goes", {{"cpu", 40}}, {model("a", {{"cpu", 50}}, 1)}, {}, {}, {}, {}},
      {"to the byte: nothing goes", {{"cpu", 50}}, {model("a", {{"cpu", 50}}, 1)}, {}, {}, {}, {}},
      {"one over: the least recently used goes", {{"cpu", 30}},
       {model("a", {{"cpu", 40}}, 1), model("b", {{"cpu", 50}}, 2)}, {}, {"a"}, {}, {}},
      {"the order is last use, not the list's", {{"cpu", 30}},
       {model("a", {{"cpu", 40}}, 5), model("b", {{"cpu", 50}}, 2)}, {}, {"b"}, {}, {}},
      {"as many as it takes, oldest first", {{"cpu", 70}},
       {model("a", {{"cpu", 40}}, 3), model("b", {{"cpu", 50}}, 2)}, {}, {"b", "a"}, {}, {}},
      {"equal last use: the first listed", {{"cpu", 30}},
       {model("a", {{"cpu", 40}}, 2), model("b", {{"cpu", 50}}, 2)}, {}, {"a"}, {}, {}},
      {"a model in use stays, and is named", {{"cpu", 70}},
       {model("a", {{"cpu", 40}}, 1, /*in_use=*/true), model("b", {{"cpu", 50}}, 2)}, {}, {"b"}, {"cpu"}, {"a"}},
      {"a pinned model stays, unnamed", {{"cpu", 70}},
       {model("a", {{"cpu", 40}}, 1, false, /*pinned=*/true), model("b", {{"cpu", 50}}, 2)}, {}, {"b"}, {"cpu"}, {}},
      {"all in use: nothing goes", {{"cpu", 30}},
       {model("a", {{"cpu", 40}}, 1, true), model("b", {{"cpu", 50}}, 2, true)}, {}, {}, {"cpu"}, {"a", "b"}},
      {"memory still held by a request: evicted, still over", {{"cpu", 30}}, {model("a", {{"cpu", 20}}, 1)},
       {{"cpu", 75}}, {"a"}, {"cpu"}, {}},
      {"a load larger than what can go", {{"cpu", 90}}, {model("a", {{"cpu", 40}}, 1, true), model("b", {{"cpu", 30}}, 2)},
       {}, {"b"}, {"cpu"}, {"a"}},
      {"only the device that is short: another device's older model stays", {{"cuda:0", 30}},
       {model("a", {{"cuda:1", 80}}, 1), model("b", {{"cuda:0", 80}}, 2)}, {}, {"b"}, {}, {}},
      {"a model in use on another device is not named", {{"cuda:0", 30}},
       {model("a", {{"cuda:1", 80}}, 1, true), model("b", {{"cuda:0", 80}}, 2, true)}, {}, {}, {"cuda:0"}, {"b"}},
      {"one model on two devices frees both", {{"cuda:0", 30}, {"cuda:1", 30}},
       {model("a", {{"cuda:0", 80}, {"cuda:1", 80}}, 1), model("b", {{"cuda:0", 10}}, 2)}, {}, {"a"}, {}, {}},
      {"two devices short, each by its own model", {{"cuda:0", 30}, {"cuda:1", 30}},
       {model("a", {{"cuda:0", 80}}, 2), model("b", {{"cuda:1", 80}}, 1), model("c", {{"cuda:1", 10}}, 0)}, {},
       {"c", "b", "a"}, {}, {}},
      {"nothing loaded and over: nothing to do", {{"cpu", 30}}, {}, {{"cpu", 90}}, {}, {"cpu"}, {}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const EvictionPlan plan = plan_eviction(row.need, used_by(row.models, row.other), budget, row.models);
    EXPECT_EQ(plan.evict, row.evict);
    EXPECT_EQ(plan.over, row.over);
    EXPECT_EQ(plan.busy, row.busy);
  }
}
