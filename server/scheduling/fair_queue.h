#pragma once
// Fair queueing across tenants (docs/server.md, "Fairness"): the order in which a model's
// waiting sentences leave the queue for the decode loops, and how many one tenant may keep
// waiting, as plain state without threads or clocks. The Scheduler holds one under its lock
// and does what it says; the rules live here alone, tested as tables
// (tests/server/scheduling/test_fair_queue.cc).
//
// Order: start-time fair queueing (Goyal, Vin and Cheng, SIGCOMM 1996), the sorted-queue form
// of weighted round-robin. Each sentence gets a start tag when it is queued: the later of the
// queue's virtual time and the end of its tenant's previous sentence; a sentence ends
// kTagUnit / weight after its start. The queue is served in (tag, arrival) order, and its
// virtual time is the tag of the last sentence served. A tenant that queues 1,000 sentences
// thus holds tags far ahead, and another tenant's sentence queued now starts at the virtual
// time: it waits behind at most one sentence of every other tenant with work waiting (a
// weight-w tenant: w of them), not behind the 1,000. Within a tenant, first come first served.
// A tenant that has nothing waiting forgets its tags (the state stays bounded by the queue):
// it comes back at the virtual time, with no credit banked from its idle time.
//
// Share: a tenant may hold at most ceil(max_queue_sentences * tenant_share * weight) waiting
// sentences (batching.tenant_queue_share); one more is refused RESOURCE_EXHAUSTED, naming the
// share, while the others' requests are still taken as long as the queue as a whole has room
// (batching.max_queue_sentences).
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace nmt::server {

class FairQueue {
 public:
  // A sentence of weight 1 spans this much virtual time (weights divide it).
  static constexpr uint64_t kTagUnit = uint64_t(1) << 20;
  static constexpr int kMaxWeight = 1000;

  FairQueue(size_t max_queue_sentences, double tenant_share);

  // The most sentences a tenant of `weight` may keep waiting.
  size_t tenant_limit(int weight) const;
  // Why `n` more sentences of `tenant` (of `weight`) may not be queued now; empty when they may.
  // Either bound: the tenant's share, or the queue's max_queue_sentences.
  std::string refusal(const std::string& tenant, int weight, size_t n) const;
  // Queues one sentence of `tenant`: its start tag (serve smaller tags first, ties in arrival
  // order).
  uint64_t enqueue(const std::string& tenant, int weight);
  // A sentence of `tenant` with start tag `tag` left the queue for a loop: the virtual time
  // moves on to its tag.
  void served(const std::string& tenant, uint64_t tag);
  // A sentence of `tenant` left the queue without being served (cancelled, expired).
  void dropped(const std::string& tenant);

  size_t queued() const { return total_; }
  size_t queued(const std::string& tenant) const;
  uint64_t virtual_time() const { return virtual_time_; }
  size_t tenants() const { return tenants_.size(); }  // with sentences waiting

 private:
  struct Tenant {
    size_t queued = 0;
    uint64_t last_end = 0;  // where its next sentence may start at the earliest
  };
  void left(const std::string& tenant);

  size_t max_queue_;
  double share_;
  std::unordered_map<std::string, Tenant> tenants_;
  size_t total_ = 0;
  uint64_t virtual_time_ = 0;
};

}  // namespace nmt::server
