// The CUDA engine's persistent buffers (decode_state.h): allocated by reserve(), the key-row
// tables grown by a step past their positions, the encoder's grown by a larger encode (each
// change drops the graphs that point into them); the pools of keys/values and the step
// buffers backed as sentences are encoded and stepped and given back at release().
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "model/cuda/cuda_engine_class.h"
#include "model/error.h"

namespace nmt::cuda {

// Allocates the state of `cap` (the old one is released): its tables, and the pools of
// keys/values and step buffers with addresses for all of `cap` and memory for nothing yet
// but the scratch row's block and a step of a few rows; every slot length 0.
template <typename T>
void CudaEngine<T>::allocate_state(const EngineCapacity& cap) {
  const int rows = padded_rows_bound(cap.rows), cache_rows = cap.rows + 1;
  const size_t d = size_t(d_), token_bytes = size_t(kv_cols()) * sizeof(T);
  DecodeState<T> s;
  // First fit over ranges of up to source_tokens each can leave holes: twice the addresses of
  // every slot full (addresses cost nothing until backed).
  s.cross_kv = DevicePool(&alloc_, device_, size_t(2) * cap.sentences * cap.source_tokens * token_bytes);
  s.slot_start.assign(size_t(cap.sentences), 0);
  s.slot_tokens.assign(size_t(cap.sentences), 0);
  s.slot_table = DeviceBuffer<int>(&alloc_, size_t(2) * (cap.sentences + 1));
  const int64_t row_blocks = (c_.max_positions + kBlockPositions - 1) / kBlockPositions;
  s.cache = DevicePool(&alloc_, device_, size_t(cap.rows * row_blocks + 1) * kBlockPositions * token_bytes);
  s.row_blocks.assign(size_t(cache_rows), {});
  s.row_blocks[size_t(cap.rows)].push_back(s.blocks.allocate());  // the scratch row's: block 0
  s.cache.grow(kBlockPositions * token_bytes);
  for (auto& t : s.key_rows) t = DeviceBuffer<int>(&alloc_, size_t(cache_rows) * cache_cap_);
  for (NextRowBuffers& n : s.next_rows) {
    n.tokens = DeviceBuffer<int>(&alloc_, size_t(rows));
    n.parents = DeviceBuffer<int>(&alloc_, size_t(rows));
    n.running = DeviceBuffer<float>(&alloc_, size_t(rows));
  }
  s.running = DeviceBuffer<float>(&alloc_, size_t(rows));
  auto step_buffer = [&](auto& b, size_t row_bytes) {
    b.row_bytes = row_bytes;
    b.pool = DevicePool(&alloc_, device_, size_t(rows) * row_bytes);
  };
  for (auto& y : s.y) step_buffer(y, d * sizeof(T));
  step_buffer(s.qkv, 3 * d * sizeof(T));
  step_buffer(s.ctx, d * sizeof(T));
  step_buffer(s.tmp, d * sizeof(T));
  step_buffer(s.hidden, size_t(std::max(c_.decoder_ffn_dim, 1)) * sizeof(T));
  step_buffer(s.logits, size_t(logits_ld()) * sizeof(float));
  s.topk_bytes.assign(size_t(rows) + 1, 0);
  for (int r = 1; r <= rows; ++r)
    s.topk_bytes[size_t(r)] = std::max(s.topk_bytes[size_t(r) - 1],
                                       kernels::beam_topk_workspace_bytes(r, 1, c_.target_vocab_size, kMaxTopk));
  s.topk_ws.row_bytes = 0;
  s.topk_ws.pool = DevicePool(&alloc_, device_, s.topk_bytes.back());
  s.step_in = DeviceBuffer<char>(&alloc_, StepUpload::bytes(rows, rows, true));
  for (StepLane& lane : lanes_) {
    lane.in.reserve(StepUpload::bytes(rows, rows, true));
    lane.out.reserve(size_t(2) * rows * kMaxTopk * sizeof(int));
    lane.alignment.reserve(alignment_argmax_offset(rows) + size_t(rows) * sizeof(int));
    lane.edit_table.reserve(sizeof(kernels::TokenEditTable));
  }
  parity_ = 0;
  last_step_rows_.clear();  // nothing to follow in the new state
  check_cuda(cudaMemsetAsync(s.slot_table.get(), 0, s.slot_table.size() * sizeof(int), q_.stream), "slot table");
  state_ = std::move(s);
  slot_table_.assign(state_.slot_table.size(), 0);
  cap_ = cap;
  padded_rows_cap_ = rows;
  grow_step_buffers(std::min(rows, 16));
}

// The step buffers backed for a step of `rows` padded rows.
template <typename T>
void CudaEngine<T>::grow_step_buffers(int rows) {
  DecodeState<T>& s = state_;
  if (rows <= s.step_rows) return;
  for (auto* b : {&s.y[0], &s.y[1], &s.qkv, &s.ctx, &s.tmp, &s.hidden})
    b->pool.grow(size_t(rows) * b->row_bytes);
  s.logits.pool.grow(size_t(rows) * s.logits.row_bytes);
  s.topk_ws.pool.grow(std::max<size_t>(s.topk_bytes[size_t(rows)], 1));
  s.step_rows = rows;
}

// The cache token of cache row c's position p: the row takes blocks as its positions reach
// them (the pool grows to the highest block in use; the allocator hands out the lowest free).
template <typename T>
int CudaEngine<T>::cache_token(int c, int p) {
  DecodeState<T>& s = state_;
  std::vector<int64_t>& blocks = s.row_blocks[size_t(c)];
  const size_t k = size_t(p / kBlockPositions);
  while (blocks.size() <= k) {
    const int64_t b = s.blocks.allocate();
    try {
      s.cache.grow(size_t(s.blocks.top()) * kBlockPositions * size_t(kv_cols()) * sizeof(T));
    } catch (...) {
      s.blocks.free(b);
      throw;
    }
    blocks.push_back(b);
  }
  return int(blocks[k] * kBlockPositions + p % kBlockPositions);
}

// Slot `slot`'s cross-attention K/V for `tokens` tokens: a range of the pool (the one it held
// goes back first), its first token into the slot table's host mirror.
template <typename T>
T* CudaEngine<T>::take_source_tokens(int slot, int tokens) {
  DecodeState<T>& s = state_;
  const size_t token_bytes = size_t(kv_cols()) * sizeof(T);
  free_source_tokens(slot);
  const int64_t at = s.cross_tokens.allocate(tokens);
  try {
    if (size_t(at + tokens) * token_bytes > s.cross_kv.reserved())
      throw Error(ErrorCode::kResourceExhausted,
                  "CUDA engine: the cross-attention key/value pool is too fragmented for a source of " +
                      std::to_string(tokens) + " tokens");
    s.cross_kv.grow(size_t(s.cross_tokens.top()) * token_bytes);
  } catch (...) {
    s.cross_tokens.free(at, tokens);
    throw;
  }
  s.slot_start[size_t(slot)] = at;
  s.slot_tokens[size_t(slot)] = tokens;
  slot_table_[size_t(cap_.sentences + 1 + slot)] = int(at);
  return reinterpret_cast<T*>(s.cross_kv.get()) + at * kv_cols();
}

template <typename T>
void CudaEngine<T>::free_source_tokens(int slot) {
  DecodeState<T>& s = state_;
  if (s.slot_tokens[size_t(slot)] == 0) return;
  s.cross_tokens.free(s.slot_start[size_t(slot)], s.slot_tokens[size_t(slot)]);
  s.slot_tokens[size_t(slot)] = 0;
}

// Engine::release: the slot's source tokens and the rows' blocks go back to their
// allocators, and the pools give back what lies past their tops (nothing enqueued uses a free
// token: the decode loop releases after the last step that reads them was collected).
template <typename T>
void CudaEngine<T>::release(int slot, const std::vector<int>& rows) {
  cudaSetDevice(device_);
  DecodeState<T>& s = state_;
  if (slot >= 0 && slot < cap_.sentences) free_source_tokens(slot);
  for (int c : rows) {
    if (c < 0 || c >= cap_.rows) continue;
    for (int64_t b : s.row_blocks[size_t(c)]) s.blocks.free(b);
    s.row_blocks[size_t(c)].clear();
  }
  trim_memory();
}

// What the pools back beyond their use goes back once it has been so for kRetain
// (DevicePool::trim); the step buffers keep the rows of the steps in flight.
template <typename T>
void CudaEngine<T>::trim_memory() {
  DecodeState<T>& s = state_;
  if (s.topk_bytes.empty()) return;  // nothing reserved yet
  const auto now = DevicePool::Clock::now();
  const size_t token_bytes = size_t(kv_cols()) * sizeof(T);
  s.cache.trim(size_t(s.blocks.top()) * kBlockPositions * token_bytes, now, kRetain);
  s.cross_kv.trim(size_t(s.cross_tokens.top()) * token_bytes, now, kRetain);
  int rows = 0;
  for (const StepLane& lane : lanes_)
    if (lane.in_flight) rows = std::max(rows, lane.pending.rows);
  for (auto* b : {&s.y[0], &s.y[1], &s.qkv, &s.ctx, &s.tmp, &s.hidden})
    b->pool.trim(size_t(rows) * b->row_bytes, now, kRetain);
  s.logits.pool.trim(size_t(rows) * s.logits.row_bytes, now, kRetain);
  s.topk_ws.pool.trim(s.topk_bytes[size_t(rows)], now, kRetain);
  // the rows every buffer still backs
  int backed = padded_rows_cap_;
  for (auto* b : {&s.y[0], &s.y[1], &s.qkv, &s.ctx, &s.tmp, &s.hidden})
    backed = std::min<int>(backed, int(b->pool.backed() / b->row_bytes));
  backed = std::min<int>(backed, int(s.logits.pool.backed() / s.logits.row_bytes));
  while (backed > 0 && s.topk_bytes[size_t(backed)] > s.topk_ws.pool.backed()) --backed;
  s.step_rows = backed;
}

template <typename T>
void CudaEngine<T>::trim_idle_memory() {
  cudaSetDevice(device_);
  trim_memory();
}

template <typename T>
void CudaEngine<T>::drop_graphs(GraphCache& cache) {
  if (cache.graphs.empty()) return;
  wait("drop graphs");
  cache.clear();
}

template <typename T>
void CudaEngine<T>::drop_graphs() {
  drop_graphs(step_graphs_);
  drop_graphs(encode_graphs_);  // they write the slot table, which reserve() replaces
}

// Doubles the positions of the key-row tables (up to max_positions), keeping both; the
// keys/values themselves are in blocks (cache_token()).
template <typename T>
void CudaEngine<T>::grow_cache(int positions) {
  if (positions <= cache_cap_) return;
  int cap = cache_cap_;
  while (cap < positions) cap *= 2;
  cap = std::min(cap, c_.max_positions);
  const int64_t rows = cap_.rows + 1;
  DeviceBuffer<int> next_rows[2] = {DeviceBuffer<int>(&alloc_, size_t(rows) * cap),
                                    DeviceBuffer<int>(&alloc_, size_t(rows) * cap)};
  drop_graphs(step_graphs_);
  for (int t = 0; t < 2; ++t) {
    check_cuda(cudaMemcpy2DAsync(next_rows[t].get(), size_t(cap) * sizeof(int), state_.key_rows[t].get(),
                                 size_t(cache_cap_) * sizeof(int), size_t(cache_cap_) * sizeof(int), rows,
                                 cudaMemcpyDeviceToDevice, q_.stream),
               "cache growth");
    state_.key_rows[t] = std::move(next_rows[t]);
  }
  cache_cap_ = cap;
}

// Encoder buffers for n sentences of `rows` tokens in all, grown in steps, and the pinned
// upload buffer for them and the slot table. The encode graphs point into both: a growth
// drops them.
template <typename T>
void CudaEngine<T>::reserve_encode(int n, int rows) {
  if (n > enc_.sentences || rows > enc_.rows) {
    drop_graphs(encode_graphs_);
    check_cuda(cudaEventSynchronize(encoded_), "encode");  // the last encode's buffers
    const int sentences = std::max(enc_.sentences, (n + 15) / 16 * 16);
    const int most = std::max(enc_.rows, (rows + 1023) / 1024 * 1024);
    const size_t d = size_t(d_);
    enc_ = EncodeBuffers<T>();  // release first: a lower peak
    EncodeBuffers<T> b;
    b.sentences = sentences;
    b.rows = most;
    b.in = DeviceBuffer<char>(&alloc_, EncodeUpload::device_bytes(sentences, most));
    for (auto& x : b.x) x = DeviceBuffer<T>(&alloc_, size_t(most) * d);
    b.qkv = DeviceBuffer<T>(&alloc_, size_t(most) * 3 * d);
    b.ctx = DeviceBuffer<T>(&alloc_, size_t(most) * d);
    b.tmp = DeviceBuffer<T>(&alloc_, size_t(most) * d);
    b.hidden = DeviceBuffer<T>(&alloc_, size_t(most) * std::max(c_.encoder_ffn_dim, 1));
    enc_ = std::move(b);
  }
  const size_t upload = EncodeUpload::bytes(enc_.sentences, enc_.rows, int(slot_table_.size()));
  if (enc_in_.capacity() < upload) {
    drop_graphs(encode_graphs_);
    check_cuda(cudaEventSynchronize(enc_uploaded_), "encode upload");
    enc_in_.reserve(upload);
  }
}

#define NMT_DECODE_STATE(T)                                                          \
  template void CudaEngine<T>::allocate_state(const EngineCapacity&);                \
  template void CudaEngine<T>::drop_graphs(GraphCache&);                             \
  template void CudaEngine<T>::drop_graphs();                                        \
  template void CudaEngine<T>::grow_cache(int);                                      \
  template void CudaEngine<T>::grow_step_buffers(int);                               \
  template int CudaEngine<T>::cache_token(int, int);                                 \
  template T* CudaEngine<T>::take_source_tokens(int, int);                           \
  template void CudaEngine<T>::free_source_tokens(int);                              \
  template void CudaEngine<T>::release(int, const std::vector<int>&);                \
  template void CudaEngine<T>::trim_memory();                                        \
  template void CudaEngine<T>::trim_idle_memory();                                   \
  template void CudaEngine<T>::reserve_encode(int, int);
NMT_DECODE_STATE(float)
NMT_DECODE_STATE(__half)
#undef NMT_DECODE_STATE

}  // namespace nmt::cuda
