#include "model/cpu/kv_state.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "model/error.h"

namespace nmt::cpu {

BlockPool::BlockPool(size_t block_floats, size_t min_blocks_per_chunk, size_t limit_bytes)
    : block_floats_(block_floats),
      // Whole huge pages of at least min_blocks_per_chunk blocks (the tail short of a block unused).
      blocks_per_chunk_(((std::max<size_t>(1, min_blocks_per_chunk) * block_floats * sizeof(float) + kHugePage - 1) /
                         kHugePage * kHugePage) /
                        (block_floats * sizeof(float))),
      limit_bytes_(limit_bytes) {}

BlockPool::~BlockPool() {
  while (!chunks_.empty()) unmap(chunks_.begin());
}

bool BlockPool::fits(size_t blocks) const {
  return limit_bytes_ == 0 || (used_ + blocks) * block_bytes() <= limit_bytes_;
}

float* BlockPool::allocate() {
  if (!fits(1)) {
    throw Error(ErrorCode::kResourceExhausted,
                "out of memory: the decode state would need more than its limit of " +
                    std::to_string(limit_bytes_ >> 20) + " MiB");
  }
  auto it = chunks_.begin();
  while (it != chunks_.end() && it->second.free.empty()) ++it;
  if (it == chunks_.end()) {
    float* base = map_chunk();
    Chunk chunk;
    chunk.free.reserve(blocks_per_chunk_);
    // Handed out lowest first (popped from the back).
    for (size_t b = blocks_per_chunk_; b-- > 0;) chunk.free.push_back(base + b * block_floats_);
    it = chunks_.emplace(base, std::move(chunk)).first;
    ++empty_chunks_;
  }
  if (it->second.free.size() == blocks_per_chunk_) --empty_chunks_;
  float* block = it->second.free.back();
  it->second.free.pop_back();
  ++used_;
  return block;
}

void BlockPool::free(float* block) {
  auto it = chunks_.upper_bound(block);
  if (it == chunks_.begin()) throw Error(ErrorCode::kInternal, "decode state: freeing a block of no chunk");
  --it;
  it->second.free.push_back(block);
  --used_;
  if (it->second.free.size() < blocks_per_chunk_) return;
  ++empty_chunks_;
  // Empty: back to the OS, unless it is the one kept for a load that still holds blocks.
  if (used_ == 0) {
    while (!chunks_.empty()) unmap(chunks_.begin());
  } else if (empty_chunks_ > 1) {
    unmap(it);
  }
}

// Anonymous pages from the OS, given back whole by munmap (malloc may keep freed memory),
// aligned to and in huge pages where the kernel has them (madvise mode): a chunk's pages
// are fresh at every load that maps it again, and 4 KiB pages cost a fault each (a Translator's
// batch of 32 at beam 4 maps some 40 MiB, about 10,000 faults).
float* BlockPool::map_chunk() {
  const size_t bytes = chunk_bytes();
  void* p = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::kResourceExhausted,
                "out of memory: cannot map " + std::to_string(bytes >> 10) + " KiB of decode state");
  }
  char* start = static_cast<char*>(p);
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(start) + kHugePage - 1) & ~(kHugePage - 1));
  if (base > start) munmap(start, size_t(base - start));
  if (base + bytes < start + bytes + kHugePage) munmap(base + bytes, size_t(start + bytes + kHugePage - (base + bytes)));
#ifdef MADV_HUGEPAGE
  madvise(base, bytes, MADV_HUGEPAGE);  // a hint: without huge pages the chunk works as well
#endif
  return reinterpret_cast<float*>(base);
}

void BlockPool::unmap(std::map<float*, Chunk>::iterator it) {
  if (it->second.free.size() == blocks_per_chunk_) --empty_chunks_;
  munmap(it->first, mapped_bytes());
  chunks_.erase(it);
}

namespace {
size_t blocks_for(int64_t tokens) { return size_t((tokens + KvState::kBlockTokens - 1) / KvState::kBlockTokens); }
// Chunks of at least 4 blocks (a large model's blocks are MiBs) and a huge page (BlockPool).
constexpr size_t kMinBlocksPerChunk = 4;
}  // namespace

KvState::KvState(int64_t layers, int64_t d_model, size_t limit_bytes)
    : d_(d_model),
      pool_(size_t(layers * kBlockTokens * 2 * d_model),
            kMinBlocksPerChunk, limit_bytes) {}

void KvState::resize(int slots, int rows) {
  if (size_t(slots) > slots_.size()) {
    slots_.resize(size_t(slots));
    slot_blocks_.resize(size_t(slots));
  }
  if (size_t(rows) > rows_.size()) rows_.resize(size_t(rows));
}

size_t KvState::blocks_for_slot(int slot, int64_t tokens) const {
  const size_t need = blocks_for(tokens), held = slot_blocks_[size_t(slot)].size();
  return need > held ? need - held : 0;
}

void KvState::fill_slot(int slot, int64_t tokens) {
  std::vector<float*>& blocks = slot_blocks_[size_t(slot)];
  const size_t need = blocks_for(tokens);
  // A slot is released before it takes another sentence; one that was not (an engine driven
  // without a decode loop) keeps what it has, up to what this one needs.
  while (blocks.size() > need) {
    pool_.free(blocks.back());
    blocks.pop_back();
  }
  while (blocks.size() < need) blocks.push_back(pool_.allocate());
  std::vector<const float*>& keys = slots_[size_t(slot)];
  keys.resize(size_t(tokens));
  for (int64_t j = 0; j < tokens; ++j) keys[size_t(j)] = token(blocks, j);
}

size_t KvState::blocks_for_step(const std::vector<int>& cache_rows, const std::vector<int>& positions) const {
  size_t need = 0;
  for (size_t r = 0; r < cache_rows.size(); ++r) {
    const size_t want = blocks_for(int64_t(positions[r]) + 1), held = rows_[size_t(cache_rows[r])].blocks.size();
    if (want > held) need += want - held;
  }
  return need;
}

void KvState::reorder(const std::vector<int>& cache_rows, const std::vector<int>& parent_rows,
                      const std::vector<int>& positions) {
  const size_t n = cache_rows.size();
  if (next_.size() < n) next_.resize(n);
  // All new tables first: a parent may be another row of the same step.
  for (size_t r = 0; r < n; ++r) {
    const int64_t t = positions[r];
    Row& own = rows_[size_t(cache_rows[r])];
    while (int64_t(own.blocks.size()) * kBlockTokens <= t) own.blocks.push_back(pool_.allocate());
    const std::vector<const float*>& from = rows_[size_t(parent_rows[r])].keys;
    std::vector<const float*>& to = next_[r];
    to.resize(size_t(t) + 1);
    std::copy_n(from.begin(), std::min<size_t>(size_t(t), from.size()), to.begin());
    to[size_t(t)] = token(own.blocks, t);
  }
  for (size_t r = 0; r < n; ++r) rows_[size_t(cache_rows[r])].keys.swap(next_[r]);
}

void KvState::free_blocks(std::vector<float*>* blocks) {
  for (float* b : *blocks) pool_.free(b);
  std::vector<float*>().swap(*blocks);
}

void KvState::release(int slot, const std::vector<int>& rows) {
  if (slot >= 0 && size_t(slot) < slots_.size()) {
    free_blocks(&slot_blocks_[size_t(slot)]);
    std::vector<const float*>().swap(slots_[size_t(slot)]);
  }
  for (int r : rows) {
    if (r < 0 || size_t(r) >= rows_.size()) continue;
    free_blocks(&rows_[size_t(r)].blocks);
    std::vector<const float*>().swap(rows_[size_t(r)].keys);
  }
  if (empty()) std::vector<std::vector<const float*>>().swap(next_);
}

size_t KvState::bytes() const {
  size_t table = (slots_.capacity() + slot_blocks_.capacity() + next_.capacity()) * sizeof(std::vector<float*>) +
                 rows_.capacity() * sizeof(Row);
  for (size_t s = 0; s < slots_.size(); ++s)
    table += (slots_[s].capacity() + slot_blocks_[s].capacity()) * sizeof(float*);
  for (const Row& r : rows_) table += (r.blocks.capacity() + r.keys.capacity()) * sizeof(float*);
  for (const auto& v : next_) table += v.capacity() * sizeof(float*);
  return pool_.bytes_mapped() + table;
}

}  // namespace nmt::cpu
