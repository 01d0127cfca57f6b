// BlockAllocator and RangeAllocator (model/decoding/token_allocator.h): lowest first, the top
// falls as the highest allocations are freed, ranges merge, misuse throws.
#include "model/decoding/token_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

namespace nmt {
namespace {

TEST(BlockAllocator, LowestFirstAndTheTopFalls) {
  BlockAllocator a;
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 2);
  EXPECT_EQ(a.allocate(), 3);
  a.free(1);
  EXPECT_EQ(a.top(), 4);
  EXPECT_EQ(a.in_use(), 3);
  EXPECT_EQ(a.allocate(), 1);  // the hole before the top
  a.free(2);
  a.free(3);  // the top falls past 2 as well
  EXPECT_EQ(a.top(), 2);
  a.free(0);
  EXPECT_EQ(a.top(), 2);
  a.free(1);
  EXPECT_EQ(a.top(), 0);
  EXPECT_EQ(a.in_use(), 0);
  EXPECT_EQ(a.allocate(), 0);
}

TEST(BlockAllocator, FreeingWhatIsNotInUseThrows) {
  BlockAllocator a;
  EXPECT_THROW(a.free(0), std::logic_error);
  a.allocate();
  a.allocate();
  a.free(0);
  EXPECT_THROW(a.free(0), std::logic_error);
  EXPECT_THROW(a.free(2), std::logic_error);
  EXPECT_THROW(a.free(-1), std::logic_error);
}

TEST(BlockAllocator, RandomUseKeepsTheTopAtTheHighestBlockInUse) {
  BlockAllocator a;
  std::vector<char> used;
  std::mt19937 gen(7);
  for (int i = 0; i < 20000; ++i) {
    if (gen() % 3 != 0) {
      const int64_t b = a.allocate();
      // the lowest free block
      for (int64_t j = 0; j < b; ++j) ASSERT_TRUE(used[size_t(j)]) << "block " << j << " was free below " << b;
      if (size_t(b) >= used.size()) used.resize(size_t(b) + 1, 0);
      ASSERT_FALSE(used[size_t(b)]);
      used[size_t(b)] = 1;
    } else if (a.in_use() > 0) {
      int64_t b;
      do b = int64_t(gen() % used.size()); while (!used[size_t(b)]);
      a.free(b);
      used[size_t(b)] = 0;
    }
    int64_t top = int64_t(used.size());
    while (top > 0 && !used[size_t(top - 1)]) --top;
    ASSERT_EQ(a.top(), top);
  }
}

TEST(RangeAllocator, FirstFitMergeAndTheTopFalls) {
  RangeAllocator a;
  EXPECT_EQ(a.allocate(8), 0);
  EXPECT_EQ(a.allocate(16), 8);
  EXPECT_EQ(a.allocate(8), 24);
  EXPECT_EQ(a.top(), 32);
  a.free(8, 16);
  EXPECT_EQ(a.allocate(24), 32);  // does not fit in the hole
  EXPECT_EQ(a.allocate(8), 8);    // fits, lowest first
  EXPECT_EQ(a.allocate(8), 16);
  a.free(8, 8);
  a.free(16, 8);  // merged with [8, 16)
  EXPECT_EQ(a.allocate(16), 8);
  EXPECT_EQ(a.in_use(), 8 + 16 + 8 + 24);
  a.free(32, 24);  // the top range: the top falls to 32
  EXPECT_EQ(a.top(), 32);
  a.free(8, 16);
  a.free(24, 8);  // merges with [8, 24) and reaches the top: the top falls to 8
  EXPECT_EQ(a.top(), 8);
  a.free(0, 8);
  EXPECT_EQ(a.top(), 0);
  EXPECT_EQ(a.in_use(), 0);
}

TEST(RangeAllocator, MisuseThrows) {
  RangeAllocator a;
  EXPECT_THROW(a.allocate(0), std::logic_error);
  EXPECT_THROW(a.free(0, 8), std::logic_error);
  a.allocate(8);
  a.allocate(8);
  a.free(0, 8);
  EXPECT_THROW(a.free(0, 8), std::logic_error);  // already free
  EXPECT_THROW(a.free(4, 8), std::logic_error);  // overlaps the free range
  EXPECT_THROW(a.free(8, 16), std::logic_error);  // past the top
}

TEST(RangeAllocator, RandomUseNeverOverlapsAndTheTopIsTheHighestInUse) {
  RangeAllocator a;
  std::vector<std::pair<int64_t, int64_t>> live;
  std::vector<int> owner;  // per token: live ranges covering it
  std::mt19937 gen(11);
  for (int i = 0; i < 5000; ++i) {
    if (gen() % 2 == 0 || live.empty()) {
      const int64_t n = 1 + int64_t(gen() % 40);
      const int64_t at = a.allocate(n);
      if (size_t(at + n) > owner.size()) owner.resize(size_t(at + n), 0);
      for (int64_t t = at; t < at + n; ++t) ASSERT_EQ(owner[size_t(t)]++, 0) << "token " << t << " given twice";
      live.push_back({at, n});
    } else {
      const size_t k = gen() % live.size();
      a.free(live[k].first, live[k].second);
      for (int64_t t = live[k].first; t < live[k].first + live[k].second; ++t) --owner[size_t(t)];
      live.erase(live.begin() + long(k));
    }
    int64_t top = 0, used = 0;
    for (const auto& [at, n] : live) {
      top = std::max(top, at + n);
      used += n;
    }
    ASSERT_EQ(a.top(), top);
    ASSERT_EQ(a.in_use(), used);
  }
}

}  // namespace
}  // namespace nmt
