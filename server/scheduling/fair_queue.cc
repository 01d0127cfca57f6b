#include "server/scheduling/fair_queue.h"

#include <algorithm>
#include <cmath>

namespace nmt::server {

FairQueue::FairQueue(size_t max_queue_sentences, double tenant_share)
    : max_queue_(max_queue_sentences), share_(tenant_share) {}

size_t FairQueue::tenant_limit(int weight) const {
  const double limit = std::ceil(double(max_queue_) * share_ * double(std::clamp(weight, 1, kMaxWeight)));
  return std::max<size_t>(1, std::min(max_queue_, size_t(limit)));
}

size_t FairQueue::queued(const std::string& tenant) const {
  const auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second.queued;
}

std::string FairQueue::refusal(const std::string& tenant, int weight, size_t n) const {
  const size_t limit = tenant_limit(weight);
  const size_t own = queued(tenant);
  // A share of the whole queue is no bound of its own: the queue's message says which.
  if (limit < max_queue_ && own + n > limit) {
    if (n > limit) {
      return "a request of " + std::to_string(n) + " sentences can never fit this client's share of " +
             std::to_string(limit) + " waiting sentences (batching.tenant_queue_share of batching.max_queue_sentences)";
    }
    return "this client already has " + std::to_string(own) + " sentences waiting, its share is " +
           std::to_string(limit) + " (batching.tenant_queue_share of batching.max_queue_sentences); retry later";
  }
  if (total_ + n > max_queue_) {
    return "server overloaded: " + std::to_string(total_) +
           " sentences already queued (batching.max_queue_sentences = " + std::to_string(max_queue_) +
           "); retry later";
  }
  return "";
}

uint64_t FairQueue::enqueue(const std::string& tenant, int weight) {
  Tenant& t = tenants_[tenant];
  const uint64_t start = std::max(virtual_time_, t.last_end);
  t.last_end = start + kTagUnit / uint64_t(std::clamp(weight, 1, kMaxWeight));
  ++t.queued;
  ++total_;
  return start;
}

void FairQueue::served(const std::string& tenant, uint64_t tag) {
  virtual_time_ = std::max(virtual_time_, tag);
  left(tenant);
}

void FairQueue::dropped(const std::string& tenant) { left(tenant); }

void FairQueue::left(const std::string& tenant) {
  const auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  --total_;
  if (--it->second.queued == 0) tenants_.erase(it);
}

}  // namespace nmt::server
