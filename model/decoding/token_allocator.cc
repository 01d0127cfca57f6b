#include "model/decoding/token_allocator.h"

#include <iterator>
#include <stdexcept>
#include <string>

namespace nmt {

int64_t BlockAllocator::allocate() {
  if (free_.empty()) return top_++;
  const int64_t b = *free_.begin();
  free_.erase(free_.begin());
  return b;
}

void BlockAllocator::free(int64_t block) {
  if (block < 0 || block >= top_ || free_.count(block))
    throw std::logic_error("BlockAllocator: block " + std::to_string(block) + " is not in use");
  if (block + 1 < top_) {
    free_.insert(block);
    return;
  }
  // The top block: the top falls past every free block below it.
  --top_;
  while (!free_.empty() && *free_.rbegin() == top_ - 1) {
    free_.erase(std::prev(free_.end()));
    --top_;
  }
}

int64_t RangeAllocator::allocate(int64_t length) {
  if (length <= 0) throw std::logic_error("RangeAllocator: a range of " + std::to_string(length) + " tokens");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < length) continue;
    const int64_t at = it->first, rest = it->second - length;
    free_.erase(it);
    if (rest > 0) free_.emplace(at + length, rest);
    in_use_ += length;
    return at;
  }
  // Past the top; a free range ending at the top cannot exist (free() trims it).
  const int64_t at = top_;
  top_ += length;
  in_use_ += length;
  return at;
}

void RangeAllocator::free(int64_t offset, int64_t length) {
  if (length <= 0 || offset < 0 || offset + length > top_)
    throw std::logic_error("RangeAllocator: tokens [" + std::to_string(offset) + ", " +
                           std::to_string(offset + length) + ") are not in use");
  auto next = free_.lower_bound(offset);
  const bool overlaps_next = next != free_.end() && next->first < offset + length;
  const bool overlaps_prev = next != free_.begin() && std::prev(next)->first + std::prev(next)->second > offset;
  if (overlaps_next || overlaps_prev)
    throw std::logic_error("RangeAllocator: tokens [" + std::to_string(offset) + ", " +
                           std::to_string(offset + length) + ") are already free");
  in_use_ -= length;
  int64_t start = offset, end = offset + length;
  if (next != free_.end() && next->first == end) {
    end += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      free_.erase(prev);
    }
  }
  if (end == top_) {
    top_ = start;
  } else {
    free_.emplace(start, end - start);
  }
}

}  // namespace nmt
