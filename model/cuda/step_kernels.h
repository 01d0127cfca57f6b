#pragma once
// Kernels of the CUDA engine. The decode-step ones read the decoder position and the per-row
// indices from device memory (the one packed per-step upload), so that one captured CUDA graph
// serves every step of a sentence bucket; kernels/ takes the step and key counts by value,
// which would need a graph per step. LayerNorm, bias+activation and top-k are here too: they
// were not in kernels/ when the engine was written, and the top-k keeps the CPU engine's
// force_eos semantics (EOS keeps its log-prob; kernels/topk.h sets it to 0 as transformers'
// ForcedEOSTokenLogitsProcessor does).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/activation.h"

namespace nmt::cuda {

// out[r, :] = emb[ids[r], :] * scale + pos[p, :], p = *step when step is set, else r % seq_len.
template <typename T>
void embed(const int* ids, const T* emb, const T* pos, const int* step, int seq_len, T* out,
           int rows, int d, float scale, cudaStream_t stream);

// The beam reorder without moving the KV caches: row r's key/value at position j lives in
// cache row key_rows[r * capacity + j] (each cache row/position is written once, at that
// step, so later reorders and finished sentences never overwrite what others still read).
// new_rows[r][j] = old_rows[parent[r]][j] for j < *step, and new_rows[r][*step] = r.
void update_key_rows(const int* old_rows, int* new_rows, const int* parent, int rows,
                     int capacity, const int* step, cudaStream_t stream);

// Decoder self-attention of one step, one warp per (row, head): appends the row's new key and
// value (qkv[r, d:3d] + bias) at position *step of cache row r, then attends over positions
// 0..*step through key_rows. q = (qkv[r, 0:d] + bias) * scale.
template <typename T>
struct DecoderSelfAttention {
  const T* qkv = nullptr;   // [rows, 3d]
  const T* bias = nullptr;  // [3d]
  T* k_cache = nullptr;     // [rows_cap, capacity, d]
  T* v_cache = nullptr;
  const int* key_rows = nullptr;  // [rows, capacity]
  const int* step = nullptr;
  T* out = nullptr;         // [rows, d]
  int rows = 0, capacity = 0, heads = 0, head_dim = 0;
  float scale = 1.f;
};
template <typename T>
void decoder_self_attention(const DecoderSelfAttention<T>& p, cudaStream_t stream);

// Multi-head attention, one warp per (query, head), scores and softmax in float32; head sizes
// 32, 64, 128:
//   query row  qr = b * q_len + i          q[qr * q_ld + h * hd + c] (+ q_bias), times scale
//   kv batch   kb = kv_index ? kv_index[b] : b
//   key j      k[kb * kv_batch_stride + j * kv_ld + h * hd + c]  (v alike)
//   keys seen  n = key_lengths ? key_lengths[kb] : *step + 1 (decoder self-attention)
//   out[qr * out_ld + h * hd + c] = sum_j p_j v_j + v_bias
// The key bias adds the same q.bk to every score of a query, which softmax ignores: none taken.
template <typename T>
struct AttentionParams {
  const T* q = nullptr; int64_t q_ld = 0; const T* q_bias = nullptr;
  const T* k = nullptr; const T* v = nullptr; int64_t kv_ld = 0; int64_t kv_batch_stride = 0;
  const T* v_bias = nullptr;
  const int* kv_index = nullptr;
  const int* key_lengths = nullptr;
  const int* step = nullptr;
  T* out = nullptr; int64_t out_ld = 0;
  int batches = 0, q_len = 1, heads = 0, head_dim = 0, max_keys = 0;
  float scale = 1.f;
};
template <typename T>
void attention(const AttentionParams<T>& p, cudaStream_t stream);

// y = LN(x + residual + bias) * gamma + beta per row (residual/bias may be null; y may alias
// x or residual).
template <typename T>
void layer_norm(const T* x, const T* residual, const T* bias, const T* gamma, const T* beta,
                T* y, int rows, int cols, float eps, cudaStream_t stream);

// x = act(x + bias) in place.
template <typename T>
void bias_activation(T* x, const T* bias, int rows, int cols, kernels::Activation act,
                     cudaStream_t stream);

// Beam-search top-k over float32 logits [sentences * beam, vocab] (see model/engine.h):
// log-softmax of (logits + bias) in float32, pad -> -inf, mask_eos -> eos -inf, force_eos ->
// only eos (its log-prob kept, as the CPU engine does), plus running_scores[row]; per sentence the k best of beam x vocab,
// best first, ties to the lower index; index = row_in_sentence * vocab + token.
struct TopkShape {
  int sentences = 0, beam = 1, vocab = 0, k = 1;
  int pad_id = -1, eos_id = -1;
  bool mask_eos = false, force_eos = false;
};
int topk_splits(int rows, int vocab);
size_t topk_workspace_bytes(const TopkShape& s);
void beam_topk(const float* logits, const float* bias, const float* running_scores,
               const TopkShape& s, float* out_scores, int* out_index, void* workspace,
               cudaStream_t stream);
constexpr int kMaxTopk = 32;  // k of the beam search (2 x beam): beams up to 16

// dst[i] = T(src[i]).
template <typename T>
void convert_from_float(const float* src, T* dst, int64_t n, cudaStream_t stream);

}  // namespace nmt::cuda
