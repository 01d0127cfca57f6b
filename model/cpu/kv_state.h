#pragma once
// The CPU engine's decode state (docs/data-flow.md, "Decode-state memory"): the keys and
// values of the decoder's attention in blocks, and the tables that find them.
//
// BlockPool: fixed-size blocks of floats, each holding the keys and values of a few tokens,
// in chunks mapped from the OS (whole 2 MiB huge pages, aligned). A sentence's cross-attention keys/values and a cache row's self-attention keys/values
// take blocks as their tokens arrive and give them back when the sentence leaves, so the memory
// held follows the tokens in flight. A chunk that empties goes back to the OS (munmap), but for
// one kept while other blocks are in use, so that a load hovering at a chunk's edge does not
// map and unmap one every step (fresh pages cost page faults: model/cpu/buffer.h). Blocks are
// taken from the lowest-addressed chunk that has one, so that a shrinking load empties the
// chunks at the top.
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace nmt::cpu {

class BlockPool {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;
  // Blocks of `block_floats` floats, as many to a chunk as the huge pages that hold
  // `min_blocks_per_chunk` of them take. limit_bytes: the most the blocks in use may hold (0 =
  // no cap).
  BlockPool(size_t block_floats, size_t min_blocks_per_chunk, size_t limit_bytes);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Whether `blocks` more fit the limit (the caller checks before it changes any state).
  bool fits(size_t blocks) const;
  // A block (its contents undefined). Throws nmt::Error(kResourceExhausted) over the limit
  // or when the OS has no memory for a new chunk.
  float* allocate();
  void free(float* block);  // a block from allocate()

  size_t block_bytes() const { return block_floats_ * sizeof(float); }
  size_t chunk_bytes() const { return mapped_bytes(); }  // a chunk's mapping
  size_t blocks_used() const { return used_; }
  size_t bytes_mapped() const { return chunks_.size() * mapped_bytes(); }  // what the OS gave

 private:
  struct Chunk {
    std::vector<float*> free;  // its free blocks
  };
  float* map_chunk();
  void unmap(std::map<float*, Chunk>::iterator it);
  size_t mapped_bytes() const {  // a chunk's blocks rounded up to huge pages
    return (block_bytes() * blocks_per_chunk_ + kHugePage - 1) / kHugePage * kHugePage;
  }

  const size_t block_floats_, blocks_per_chunk_, limit_bytes_;
  std::map<float*, Chunk> chunks_;  // by base address
  size_t used_ = 0;                 // blocks handed out
  size_t empty_chunks_ = 0;         // mapped chunks with no block in use
};

// KvState: a block holds kBlockTokens tokens of every decoder layer, [layers][kBlockTokens]
// [2d] (a token's key, then its value). A sentence slot's blocks hold its cross-attention
// keys/values (encode), a cache row's its self-attention keys/values at the positions it
// wrote. The tables point at each token's key (of layer 0; layer l is layer_offset(l) further):
// a slot's per source token, a cache row's per position of its history, which the beam search
// spreads over the cache rows of its sentence (reorder()), so beams share their history
// without copying it. Capacity (slots, rows) is logical: a table costs nothing until used.
class KvState {
 public:
  static constexpr int64_t kBlockTokens = 16;
  KvState(int64_t layers, int64_t d_model, size_t limit_bytes);

  void resize(int slots, int rows);  // the tables (only grows)
  int64_t layer_offset(int64_t layer) const { return layer * kBlockTokens * 2 * d_; }

  // A sentence of `tokens` source tokens into `slot` (its previous one's blocks go first).
  // blocks_for_slot(): what it takes beyond what the slot holds, for fits().
  size_t blocks_for_slot(int slot, int64_t tokens) const;
  void fill_slot(int slot, int64_t tokens);
  // Where token j's key of layer 0 goes (its value d floats after it).
  float* slot_token(int slot, int64_t j) const { return const_cast<float*>(slots_[size_t(slot)][size_t(j)]); }
  const float* const* slot_keys(int slot) const { return slots_[size_t(slot)].data(); }
  int64_t slot_length(int slot) const { return int64_t(slots_[size_t(slot)].size()); }

  // A step's rows: row r writes position positions[r] into cache row cache_rows[r], whose
  // positions before are those of parent_rows[r]. blocks_for_step(): the blocks it takes, for
  // fits(); reorder() takes them and sets the rows' tables.
  size_t blocks_for_step(const std::vector<int>& cache_rows, const std::vector<int>& positions) const;
  void reorder(const std::vector<int>& cache_rows, const std::vector<int>& parent_rows,
               const std::vector<int>& positions);
  // The row's history after reorder(): position j's key at keys[j] (its own last position
  // included, where the step writes it).
  const float* const* row_keys(int row) const { return rows_[size_t(row)].keys.data(); }
  int64_t row_length(int row) const { return int64_t(rows_[size_t(row)].keys.size()); }  // positions held
  float* row_token(int row, int64_t position) const {
    return const_cast<float*>(rows_[size_t(row)].keys[size_t(position)]);
  }

  bool fits(size_t blocks) const { return pool_.fits(blocks); }
  static size_t blocks_for_tokens(int64_t tokens) { return size_t((tokens + kBlockTokens - 1) / kBlockTokens); }
  // The slot's and rows' blocks back to the pool, their tables emptied.
  void release(int slot, const std::vector<int>& rows);
  bool empty() const { return pool_.blocks_used() == 0; }  // no block in use
  size_t bytes() const;  // the chunks mapped and the tables

 private:
  struct Row {
    std::vector<float*> blocks;      // its own, position p in blocks[p / kBlockTokens]
    std::vector<const float*> keys;  // per position of its history: that token's key
  };
  void free_blocks(std::vector<float*>* blocks);
  float* token(const std::vector<float*>& blocks, int64_t j) const {
    return blocks[size_t(j / kBlockTokens)] + (j % kBlockTokens) * 2 * d_;
  }

  const int64_t d_;
  BlockPool pool_;
  std::vector<std::vector<float*>> slot_blocks_;
  std::vector<std::vector<const float*>> slots_;  // per slot, its source tokens' keys
  std::vector<Row> rows_;
  std::vector<std::vector<const float*>> next_;  // reorder()'s new tables, before they swap in
};

}  // namespace nmt::cpu
