#pragma once
// Elementwise fusions of the Transformer forward pass and the beam search: embedding lookup
// with scale and position, bias add, beam reorder of the KV-cache key-row table, type
// conversion. Bias + activation lives in activation.h, bias + residual is fused into
// layer_norm.h's load, the KV-cache append into attention.h's decoder_self_attention.
#include <cstdint>

#include "kernels/stream.h"

namespace nmt::kernels {

// out[r, :] = embeddings[ids[r], :] * scale + positions_table[p, :] with p = *step when step
// is set (a decode step: every row at the same position, read from memory so that one captured
// CUDA graph serves every step), else p = positions[r]. positions_table may be null: no
// position term.
void embed_positions_cpu(const int* ids, const float* embeddings, const float* positions_table,
                         const int* positions, float* out, int64_t rows, int d_model,
                         float scale, const int* step = nullptr);
// x[r, c] += bias[c]
void add_bias_cpu(float* x, const float* bias, int64_t rows, int64_t cols);

// Beam reorder without moving the KV caches. key_rows[c * capacity + j] names the cache token
// that holds cache row c's key/value at position j (decoder_self_attention writes it once, at
// the sentence's step j, so later reorders never overwrite what other rows still read). Row r
// owns cache row c = cache_rows[r] (c = r when cache_rows is null), is at position
// t = positions[r] (t = *step for every row when positions is null; step may then be null)
// and writes token tokens[r] there (c * capacity + t when tokens is null: a dense cache).
// After the beam search picked the cache row parent[r] that row r continues:
//   new_rows[c][j] = old_rows[parent[r]][j] for j < t,  new_rows[c][t] = tokens[r].
// Only this int table moves (rows x (t + 1) ints), never the caches.
void beam_reorder_key_rows_cpu(const int* old_rows, int* new_rows, const int* parent,
                               int64_t rows, int capacity, const int* step,
                               const int* positions = nullptr, const int* cache_rows = nullptr,
                               const int* tokens = nullptr);

#if NMT_WITH_CUDA
// T = float, __half or __nv_bfloat16 for all of these; ids/positions/step/parent/key-row
// tables are device ints. With q set the table is int8, row i q[i, :] * q_scale[i]
// (kernels/quantize.h: a tied table held once, as the int8 output projection), and
// embeddings is not read.
template <typename T>
void embed_positions_cuda(const int* ids, const T* embeddings, const T* positions_table,
                          const int* positions, T* out, int64_t rows, int d_model, float scale,
                          cudaStream_t stream, const int* step = nullptr, const int8_t* q = nullptr,
                          const float* q_scale = nullptr);
template <typename T>
void add_bias_cuda(T* x, const T* bias, int64_t rows, int64_t cols, cudaStream_t stream);
// A decode step's token embedding (embed_positions_cuda's operands; positions come from the
// reorder's per-row positions).
template <typename T>
struct RowEmbedding {
  const int* ids = nullptr;
  const T* embeddings = nullptr;
  const T* positions_table = nullptr;  // may be null
  T* out = nullptr;
  int d_model = 0;
  float scale = 1.f;
  // >= 0: a row whose token is this id gets no position term (M2M-100's <pad>, whose position
  // vector is zeros); -1: every row gets its position's.
  int zero_position_token = -1;
  // The table as int8 with per-row scales (embed_positions_cuda's q, q_scale): embeddings unread.
  const int8_t* q = nullptr;
  const float* q_scale = nullptr;
};
// beam_reorder_key_rows_cpu with per-row positions (cache_rows may be null) and
// embed_positions_cuda(e.ids, e.embeddings, e.positions_table, positions, e.out, rows, ...) in
// one launch, a block per row up to 32 rows and a block per 8 rows past that: the two start a
// decode step, where at small batches each would cost a kernel's latency rather than its work.
// With `upload` set, parent, positions, cache_rows and e.ids may point into pinned host memory
// (the step's upload as the host wrote it): the launch also copies upload.bytes from upload.src
// to upload.dst for the step's later kernels, in place of a copy on the stream.
struct StepUploadCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t bytes = 0;
};
// With `follow` (rows set), row r with rows[r] >= 0 continues the beam that the step before
// chose for it on the device (kernels::NextRows, entry rows[r]: StepGroup::follows in
// model/decoding/engine.h): its token and parent come from there instead of e.ids[r] and parent[r]. Every
// row's running score, from there or from running_in[r], goes to running_out[r] for the
// step's top-k. rows and running_in may point into the pinned upload.
struct StepFollow {
  const int* rows = nullptr;
  const int* tokens = nullptr;  // the step before's NextRows
  const int* parents = nullptr;
  const float* running = nullptr;
  const float* running_in = nullptr;
  float* running_out = nullptr;
};
template <typename T>
void beam_reorder_and_embed_cuda(const int* old_rows, int* new_rows, const int* parent,
                                 int64_t rows, int capacity, const int* positions,
                                 const int* cache_rows, const RowEmbedding<T>& e,
                                 cudaStream_t stream, StepUploadCopy upload = {}, StepFollow follow = {},
                                 const int* tokens = nullptr);
// dst[i] = To(src[i]) for n elements; From/To among float, __half, __nv_bfloat16.
template <typename From, typename To>
void convert_cuda(const From* src, To* dst, int64_t n, cudaStream_t stream);
#endif

}  // namespace nmt::kernels
