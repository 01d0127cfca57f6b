// Fair queueing across tenants (server/scheduling/fair_queue.h) as tables: a script of
// arrivals and services, the order the queue serves them in; the shares and their refusals.
// No threads, no clocks.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/scheduling/fair_queue.h"

using namespace nmt::server;

namespace {

// One step of a script: `n` sentences of tenant `tenant` (of `weight`) arrive, or (tenant
// empty) the queue serves `n` from its front.
struct Step {
  std::string tenant;
  int n;
  int weight = 1;
};

// The tenants in the order the queue serves them, as the Scheduler keeps it: a map from
// (tag, arrival) to the sentence's tenant. Whatever is left at the end is served too.
std::string served_order(const std::vector<Step>& script) {
  FairQueue fair(1000, 1.0);
  std::map<std::pair<uint64_t, uint64_t>, std::string> queue;
  uint64_t arrivals = 0;
  std::string order;
  auto serve = [&](int n) {
    for (int i = 0; i < n && !queue.empty(); ++i) {
      const auto front = queue.begin();
      fair.served(front->second, front->first.first);
      order += front->second;
      queue.erase(front);
    }
  };
  for (const Step& s : script) {
    if (s.tenant.empty()) {
      serve(s.n);
      order += "|";
      continue;
    }
    for (int i = 0; i < s.n; ++i) queue.emplace(std::make_pair(fair.enqueue(s.tenant, s.weight), arrivals++), s.tenant);
  }
  serve(int(queue.size()));
  EXPECT_EQ(fair.queued(), 0u);
  EXPECT_EQ(fair.tenants(), 0u) << "a tenant with nothing waiting keeps no state";
  return order;
}

struct OrderRow {
  std::string name;
  std::vector<Step> script;
  std::string expected;
};

TEST(FairQueue, ServesTenantsInTurn) {
  const std::vector<OrderRow> rows = {
      {"one tenant: first come, first served", {{"A", 3}}, "AAA"},
      {"a newcomer waits behind one sentence of the backlog, not all of it", {{"A", 5}, {"B", 1}}, "ABAAAA"},
      {"two backlogs alternate", {{"A", 3}, {"B", 3}}, "ABABAB"},
      {"three tenants take turns", {{"A", 4}, {"B", 2}, {"C", 1}}, "ABCABAA"},
      {"weight 2 is served twice a round", {{"A", 4, 2}, {"B", 2}}, "ABAABA"},
      {"weight 3 against two of weight 1", {{"A", 6, 3}, {"B", 2}, {"C", 2}}, "ABCAAABCAA"},
      // B arrives once A's backlog is half served: B starts at the virtual time (the tag of
      // A's last sentence served), ahead of A's rest.
      {"a late arrival starts at the virtual time", {{"A", 6}, {"", 3}, {"B", 2}}, "AAA|BABAA"},
      // An idle tenant banks nothing: B, alone for a while, does not push A back when A
      // returns; they alternate from there.
      {"no credit for idle time", {{"B", 4}, {"", 4}, {"B", 3}, {"A", 3}}, "BBBB|BABABA"},
  };
  for (const OrderRow& row : rows) EXPECT_EQ(served_order(row.script), row.expected) << row.name;
}

TEST(FairQueue, TenantLimitIsAShareOfTheQueueTimesTheWeight) {
  struct Row {
    size_t max_queue;
    double share;
    int weight;
    size_t expected;
  };
  const std::vector<Row> rows = {
      {4096, 0.25, 1, 1024}, {4096, 0.25, 2, 2048}, {4096, 0.25, 8, 4096},  // never over the queue
      {4096, 1.0, 1, 4096},  {100, 0.33, 1, 33},    {3, 0.25, 1, 1},        // at least one
      {100, 0.25, 0, 25},    {100, 0.25, 5000, 100},                        // weights clamped
  };
  for (const Row& r : rows) {
    EXPECT_EQ(FairQueue(r.max_queue, r.share).tenant_limit(r.weight), r.expected)
        << r.max_queue << " x " << r.share << " x " << r.weight;
  }
}

TEST(FairQueue, RefusesOnlyTheTenantOverItsShare) {
  FairQueue fair(100, 0.25);  // 25 a tenant
  for (int i = 0; i < 25; ++i) fair.enqueue("hog", 1);
  const std::string hog = fair.refusal("hog", 1, 1);
  EXPECT_NE(hog.find("already has 25 sentences waiting, its share is 25"), std::string::npos) << hog;
  EXPECT_NE(hog.find("batching.tenant_queue_share"), std::string::npos) << hog;
  EXPECT_EQ(fair.refusal("other", 1, 25), "") << "another tenant is not touched";
  EXPECT_EQ(fair.refusal("heavy", 2, 50), "") << "weight 2: twice the share";
  const std::string never = fair.refusal("other", 1, 26);
  EXPECT_NE(never.find("can never fit"), std::string::npos) << never;
  // Served or dropped sentences free the share.
  fair.served("hog", 0);
  EXPECT_EQ(fair.refusal("hog", 1, 1), "");
  fair.enqueue("hog", 1);
  fair.dropped("hog");
  EXPECT_EQ(fair.refusal("hog", 1, 1), "");
  EXPECT_EQ(fair.queued("hog"), 24u);
}

TEST(FairQueue, TheWholeQueueStillBoundsEveryone) {
  FairQueue fair(10, 1.0);
  for (int i = 0; i < 8; ++i) fair.enqueue(i % 2 ? "a" : "b", 1);
  EXPECT_EQ(fair.refusal("c", 1, 2), "");
  const std::string full = fair.refusal("c", 1, 3);
  EXPECT_NE(full.find("8 sentences already queued (batching.max_queue_sentences = 10)"), std::string::npos) << full;
  // A share of the whole queue: the one tenant that fills it hears of the queue, not a share.
  FairQueue whole(4, 1.0);
  for (int i = 0; i < 4; ++i) whole.enqueue("a", 1);
  const std::string alone = whole.refusal("a", 1, 1);
  EXPECT_NE(alone.find("batching.max_queue_sentences = 4"), std::string::npos) << alone;
  EXPECT_EQ(alone.find("tenant_queue_share"), std::string::npos) << alone;
}

}  // namespace
