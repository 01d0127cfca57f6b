// The CUDA engine's persistent buffers (decode_state.h): allocated by reserve(), the caches
// grown by a step past their positions, the encoder's grown by a larger encode; each change
// drops the graphs that point into them.
#include <cuda_fp16.h>

#include <algorithm>

#include "model/cuda/cuda_engine_class.h"
#include "model/error.h"

namespace nmt::cuda {

// Top-k scratch for a run of up to `rows` padded rows and any k; the runs of a step share it
// (they run one after another on the stream).
template <typename T>
size_t CudaEngine<T>::topk_workspace_bound(int rows) const {
  size_t most = 0;
  for (int r = 1; r <= rows; ++r)
    most = std::max(most, kernels::beam_topk_workspace_bytes(r, 1, c_.target_vocab_size, kMaxTopk));
  return most;
}

// Allocates the state of `cap` (the old one is released) with every slot length 0, so that
// padding rows reading slot 0 see no keys before anything was encoded.
template <typename T>
void CudaEngine<T>::allocate_state(const EngineCapacity& cap) {
  const int rows = padded_rows_bound(cap.rows), cache_rows = cap.rows + 1;
  const size_t d = size_t(d_);
  DecodeState<T> s;
  s.cross_kv = DeviceBuffer<T>(&alloc_, size_t(cap.sentences) * cap.source_tokens * kv_cols());
  s.slot_lengths = DeviceBuffer<int>(&alloc_, size_t(cap.sentences));
  s.cache = DeviceBuffer<T>(&alloc_, size_t(2) * c_.decoder_layers * cache_rows * cache_cap_ * d);
  for (auto& t : s.key_rows) t = DeviceBuffer<int>(&alloc_, size_t(cache_rows) * cache_cap_);
  for (NextRowBuffers& n : s.next_rows) {
    n.tokens = DeviceBuffer<int>(&alloc_, size_t(rows));
    n.parents = DeviceBuffer<int>(&alloc_, size_t(rows));
    n.running = DeviceBuffer<float>(&alloc_, size_t(rows));
  }
  s.running = DeviceBuffer<float>(&alloc_, size_t(rows));
  for (auto& y : s.y) y = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
  s.qkv = DeviceBuffer<T>(&alloc_, size_t(rows) * 3 * d);
  s.ctx = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
  s.tmp = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
  s.hidden = DeviceBuffer<T>(&alloc_, size_t(rows) * std::max(c_.decoder_ffn_dim, 1));
  s.logits = DeviceBuffer<float>(&alloc_, size_t(rows) * logits_ld());
  s.topk_ws = DeviceBuffer<char>(&alloc_, topk_workspace_bound(rows));
  s.step_in = DeviceBuffer<char>(&alloc_, StepUpload::bytes(rows, rows));
  for (StepLane& lane : lanes_) {
    lane.in.reserve(StepUpload::bytes(rows, rows));
    lane.out.reserve(size_t(2) * rows * kMaxTopk * sizeof(int));
  }
  parity_ = 0;
  last_step_rows_.clear();  // nothing to follow in the new state
  if (cap.sentences > 0)
    check_cuda(cudaMemsetAsync(s.slot_lengths.get(), 0, size_t(cap.sentences) * sizeof(int), q_.stream),
               "slot lengths");
  state_ = std::move(s);
  slot_lengths_.assign(size_t(cap.sentences), 0);
  cap_ = cap;
  padded_rows_cap_ = rows;
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
  drop_graphs(encode_graphs_);  // they write the slot-length table, which reserve() replaces
}

// Doubles the caches' positions (up to max_positions) keeping their contents and both
// key-row tables.
template <typename T>
void CudaEngine<T>::grow_cache(int positions) {
  if (positions <= cache_cap_) return;
  int cap = cache_cap_;
  while (cap < positions) cap *= 2;
  cap = std::min(cap, c_.max_positions);
  const int64_t rows = cap_.rows + 1, planes = int64_t(2) * c_.decoder_layers * rows;
  DeviceBuffer<T> next(&alloc_, size_t(planes) * cap * d_);
  DeviceBuffer<int> next_rows[2] = {DeviceBuffer<int>(&alloc_, size_t(rows) * cap),
                                    DeviceBuffer<int>(&alloc_, size_t(rows) * cap)};
  drop_graphs(step_graphs_);
  check_cuda(cudaMemcpy2DAsync(next.get(), size_t(cap) * d_ * sizeof(T), state_.cache.get(),
                               size_t(cache_cap_) * d_ * sizeof(T), size_t(cache_cap_) * d_ * sizeof(T), planes,
                               cudaMemcpyDeviceToDevice, q_.stream),
             "cache growth");
  for (int t = 0; t < 2; ++t) {
    check_cuda(cudaMemcpy2DAsync(next_rows[t].get(), size_t(cap) * sizeof(int), state_.key_rows[t].get(),
                                 size_t(cache_cap_) * sizeof(int), size_t(cache_cap_) * sizeof(int), rows,
                                 cudaMemcpyDeviceToDevice, q_.stream),
               "cache growth");
    state_.key_rows[t] = std::move(next_rows[t]);
  }
  state_.cache = std::move(next);
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
  const size_t upload = EncodeUpload::bytes(enc_.sentences, enc_.rows, cap_.sentences);
  if (enc_in_.capacity() < upload) {
    drop_graphs(encode_graphs_);
    check_cuda(cudaEventSynchronize(enc_uploaded_), "encode upload");
    enc_in_.reserve(upload);
  }
}

#define NMT_DECODE_STATE(T)                                                          \
  template size_t CudaEngine<T>::topk_workspace_bound(int) const;                    \
  template void CudaEngine<T>::allocate_state(const EngineCapacity&);                \
  template void CudaEngine<T>::drop_graphs(GraphCache&);                             \
  template void CudaEngine<T>::drop_graphs();                                        \
  template void CudaEngine<T>::grow_cache(int);                                      \
  template void CudaEngine<T>::reserve_encode(int, int);
NMT_DECODE_STATE(float)
NMT_DECODE_STATE(__half)
#undef NMT_DECODE_STATE

}  // namespace nmt::cuda
