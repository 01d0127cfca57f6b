#pragma once
// Multi-head attention for the small, many-batch products of translation:
//   out = softmax(scale * Q K^T + mask) V     for every (batch b, head h)
// with the head split (reading Q/K/V from [batch, len, heads, head_dim] rows) and the head
// merge (writing [batch, len, heads, head_dim]) fused into the kernels.
//
// Layout (element strides, all in units of T):
//   Q  (b, i, h, d)  at q  [b * q_batch_stride   + i * q_row_stride   + h * head_dim + d]
//   K  (kv, j, h, d) at k  [kv * kv_batch_stride + j * kv_row_stride  + h * head_dim + d]
//   V  (kv, j, h, d) at v  [kv * kv_batch_stride + j * kv_row_stride  + h * head_dim + d]
//   O  (b, i, h, d)  at out[b * out_batch_stride + i * out_row_stride + h * head_dim + d]
// where kv = kv_index[b] when kv_index is set (a device table: the beam search's rows move
// between sentences as sentences finish), else b / queries_per_kv (beams of one sentence
// share its cross-attention K/V). With kv_starts set, kv's rows start at row kv_starts[kv]
// instead (kv_starts[kv] * kv_row_stride in place of kv * kv_batch_stride): the decode
// state's pool, where each sentence's K/V take the tokens it was given.
// Key j is visible to query i iff j < key_lengths[kv] (when key_lengths is set) and, when
// causal, j <= i + causal_offset. A query that sees no key gets a zero output row.
// Optional biases fused into the loads: q_bias is added to Q before the scale, v_bias to the
// output of every query that sees a key (softmax weights sum to 1). There is no key bias: it
// adds q.b_k to every score of a query, which softmax ignores.
//
// decoder_self_attention (below) is the decoder step's sibling: the KV-cache append and the
// beam reorder through a key-row table fused into the same warp-per-(row, head) kernel.
#include <cstddef>
#include <cstdint>

#include "kernels/stream.h"

namespace nmt::kernels {

// Which implementation attention_cuda uses. kAuto: the fused decoder-step kernel (one warp per
// query and head) for M = 1, the shape-specialized tiled kernels when K/V of one head fit in
// shared memory, else cuBLAS. The others force one path (tests, benchmarks); a forced path
// that cannot handle the shape falls back to kCublas. Arguments with q_bias, v_bias or
// kv_index or kv_starts always take the decoder-step kernel (any M; the only one that fuses them).
enum class AttentionPath { kAuto, kDecoderStep, kTiled, kCublas };

template <typename T>
struct AttentionArgs {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  T* out = nullptr;
  int64_t batch = 0;       // b: query batches (sentences x beams)
  int heads = 0;
  int head_dim = 0;
  int64_t q_len = 0;       // M
  int64_t kv_len = 0;      // N
  int64_t queries_per_kv = 1;
  int64_t q_batch_stride = 0, q_row_stride = 0;
  int64_t kv_batch_stride = 0, kv_row_stride = 0;
  int64_t out_batch_stride = 0, out_row_stride = 0;
  float scale = 1.0f;
  const int* key_lengths = nullptr;  // device, one per kv batch; null = all N keys valid
  const int* kv_index = nullptr;     // device, one per query batch; null = b / queries_per_kv
  const int* kv_starts = nullptr;    // device, one per kv batch: its first row (see above)
  const T* q_bias = nullptr;         // [heads * head_dim]
  const T* v_bias = nullptr;         // [heads * head_dim]
  bool causal = false;
  int64_t causal_offset = 0;
  // K, V, key_lengths and kv_index were written two or more launches before this one on the
  // stream (the decode step's cross-attention: by the encode and the step's first launch). The
  // decoder-step kernel then reads the first keys before waiting for the previous kernel
  // (programmatic dependent launch), overlapping its end. Every kernel of ours waits for its
  // predecessor before letting the next one start (kernels/cuda/common.cuh), so by then
  // everything two launches back has finished. Leave false where the previous kernel writes them.
  bool kv_settled = false;
  AttentionPath path = AttentionPath::kAuto;
  // Scratch for the cuBLAS path (batch * heads * M * N elements of T); when null or too small
  // that path allocates stream-ordered memory (cudaMallocAsync) itself.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of scratch the cuBLAS path needs for this shape (the others need none).
size_t attention_workspace_bytes(int64_t batch, int heads, int64_t q_len, int64_t kv_len,
                                 size_t elem_size);

// float32 reference with the same layout and semantics.
void attention_cpu(const AttentionArgs<float>& a);

// Scores only: s[((b * heads + h) * M + i) * N + j] = scale * Q_bih . K_kv,j,h, or -inf where
// masked, read from the same strided layout as above (head split fused). The batched-matmul
// building block of attention, exposed for benchmarks and for callers that need the scores.
// Takes neither the biases nor kv_index (throws std::invalid_argument when they are set).
void attention_scores_cpu(const AttentionArgs<float>& a, float* scores);

// Decoder self-attention of one decode step with the KV-cache append and the beam reorder
// fused, one warp per (row, head). Row r is at position t = positions[r] (rows of sentences at
// different lengths), or t = *step for every row when positions is null; both are read from
// memory, so one captured CUDA graph serves every step. Row r owns cache row
// c = cache_rows[r] (c = r when null), whose key-row table key_rows[c * capacity + j] names
// the cache token holding its position j (see beam_reorder_key_rows in elementwise.h, which
// also gives position t its token, where this step writes):
//   q = (qkv[r, 0:d] + bias[0:d]) * scale
//   k_cache/v_cache at token key_rows[c * capacity + t] = qkv[r, d:2d] / qkv[r, 2d:3d] + bias
//   out[r] = softmax_j(q . K_j) V_j over j = 0..t, K_j and V_j at token key_rows[c * capacity + j].
// Token i's key (value) is at k_cache (v_cache) + i * token_stride, d = heads * head_dim
// elements; the decode state keeps every layer's K and V of a token together (token_stride
// 2 * layers * d), in blocks of positions handed to cache rows as they reach them (the
// tables of a dense [cache rows][capacity] cache: c * capacity + j, token_stride d).
// head_dim 4, 8, 16, 32, 64 or 128.
// Index arrays are device pointers for CUDA, host pointers for the CPU twin.
template <typename T>
struct DecoderSelfAttentionArgs {
  const T* qkv = nullptr;   // [rows, 3d]: q | k | v of this step
  const T* bias = nullptr;  // [3d]
  T* k_cache = nullptr;
  T* v_cache = nullptr;
  const int* key_rows = nullptr;    // [cache rows, capacity]: the token of each position
  const int* step = nullptr;        // t of every row (unused when positions is set)
  const int* positions = nullptr;   // [rows]: t of each row; t < capacity
  const int* cache_rows = nullptr;  // [rows]: each row's cache row (null: r); rows that share
                                    // one (padding) race on its position t
  T* out = nullptr;                 // [rows, d]
  int64_t rows = 0;
  int capacity = 0, heads = 0, head_dim = 0;
  int64_t token_stride = 0;  // elements from a token's key (value) to the next's; 0: d
  float scale = 1.0f;
  // key_rows, positions / step, cache_rows and the caches' past positions were written two or
  // more launches before this one, with a kernel of ours between (the decode step: by its first
  // launch, which copies the step's upload and reorders the key rows, and earlier steps): read
  // before waiting for the previous kernel, as AttentionArgs::kv_settled.
  bool history_settled = false;
};

// float32 reference (all pointers host pointers).
void decoder_self_attention_cpu(const DecoderSelfAttentionArgs<float>& a);

#if NMT_WITH_CUDA
// T = float, __half or __nv_bfloat16.
template <typename T>
void attention_cuda(const AttentionArgs<T>& a, cudaStream_t stream);

// The implementation attention_cuda runs for these arguments (never kAuto).
template <typename T>
AttentionPath attention_chosen_path(const AttentionArgs<T>& a);

// Scores only (see attention_scores_cpu); scores has batch * heads * M * N elements of T.
template <typename T>
void attention_scores_cuda(const AttentionArgs<T>& a, T* scores, cudaStream_t stream);

template <typename T>
void decoder_self_attention_cuda(const DecoderSelfAttentionArgs<T>& a, cudaStream_t stream);

// return_alignments (kernels/cuda/attention_argmax.cu): for each query row b (q_len 1) with
// wanted[b] != 0, the key j that softmax(scale * Q K^T) weighs most averaged over the heads
// (the lowest j of equal maxima, as torch.argmax), into argmax[b]; -1 for the other rows.
// Reads Q, K, q_bias, kv_index, kv_starts and key_lengths as attention_cuda does; writes
// nothing else. T = float or __half.
template <typename T>
void attention_argmax_cuda(const AttentionArgs<T>& a, const unsigned char* wanted, int* argmax, cudaStream_t stream);
#endif

}  // namespace nmt::kernels
