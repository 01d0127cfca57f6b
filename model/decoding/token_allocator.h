#pragma once
// Host-side bookkeeping of an engine's decode-state memory in tokens (docs/data-flow.md,
// "Decode-state memory"): which token slots of a pool are in use, handed out lowest first so
// that the pool's top drains as sentences leave and the memory above it can go back.
//   BlockAllocator: fixed-size blocks (a cache row's self-attention keys/values, B positions
//     each); O(log n) per block.
//   RangeAllocator: contiguous ranges of any length (a sentence's cross-attention keys/values,
//     one range per slot, which the kernels read as one strided run); first fit by address.
// Neither touches memory: top() says how much of the pool must be backed.
#include <cstdint>
#include <map>
#include <set>

namespace nmt {

class BlockAllocator {
 public:
  // The lowest free block.
  int64_t allocate();
  // A block of allocate() not yet freed (anything else throws std::logic_error).
  void free(int64_t block);
  int64_t top() const { return top_; }  // one past the highest block in use
  int64_t in_use() const { return top_ - int64_t(free_.size()); }

 private:
  int64_t top_ = 0;
  std::set<int64_t> free_;  // free blocks below top_
};

class RangeAllocator {
 public:
  // The lowest offset where `length` (> 0) tokens fit.
  int64_t allocate(int64_t length);
  // A range of allocate() not yet freed, with its length (anything else throws
  // std::logic_error); merged with free neighbours.
  void free(int64_t offset, int64_t length);
  int64_t top() const { return top_; }  // one past the highest token in use
  int64_t in_use() const { return in_use_; }

 private:
  int64_t top_ = 0, in_use_ = 0;
  std::map<int64_t, int64_t> free_;  // offset -> length of the free ranges below top_
};

}  // namespace nmt
