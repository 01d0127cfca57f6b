#pragma once
// Float32 building blocks of the CPU engine on top of oneDNN's GEMMs (model/cpu/gemm.h).
#include <cstdint>
#include <memory>
#include <vector>

#include "model/cpu/gemm.h"
#include "model/cpu/packed_matrix.h"

#include "model/config/weights.h"

namespace nmt::cpu {

// A linear layer y = x W^T + b with W [out, in] (Hugging Face layout), read from Weights.
struct Linear {
  const float* w = nullptr;
  const float* b = nullptr;  // null: no bias (e.g. an all-zero final_logits_bias, not added)
  int64_t in = 0, out = 0;
  std::shared_ptr<const QuantizedMatrix> int8;  // set: the product runs in int8 (int8_linear)
  std::shared_ptr<const PackedMatrix> packed;    // set: float32 through oneDNN's matmul, weights packed once
  std::shared_ptr<const std::vector<float>> storage;  // concat's weights and biases
  static Linear from(const Weights& weights, const std::string& prefix);  // prefix + ".weight"/".bias"
  // Linears of one input side by side, y [rows, sum of their outs]: the attention's Q/K/V
  // projections as one GEMM (fewer calls, each with a wider N). Copies the weights.
  static Linear concat(const std::vector<Linear>& parts);
  void quantize() { int8 = std::make_shared<QuantizedMatrix>(QuantizedMatrix::quantize(w, out, in)); }
  void pack() { packed = PackedMatrix::pack(w, out, in); }  // stays null where oneDNN cannot
  // y [rows, out] = x [rows, in] W^T + b
  void operator()(const float* x, int64_t rows, float* y) const;
};

// Multi-head attention of `queries` rows against `keys` rows of one sequence:
// out[i, h*hd:(h+1)*hd] = softmax(scale * q_i,h . k_j,h for j < valid_keys) . v_j,h.
// Rows of q/k/v/out are `q_stride`/`kv_stride`/`kv_stride`/`out_stride` floats apart. `causal`
// limits query i to keys j <= i.
struct AttentionShape {
  int64_t queries, keys, valid_keys, heads, head_dim;
  int64_t q_stride, kv_stride, out_stride;
  bool causal = false;
};
void attention(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
               std::vector<float>* scratch);

// The decoder step's attention of one query row (q, out: heads * head_dim floats) against
// `keys` keys and values: key j at rows[j] + offset, its value at rows[j] + offset +
// value_offset (a row per token wherever its block is: the decode state's blocks,
// model/cpu/block_pool.h, and a beam's history spread over cache rows). Per head the dot
// products in one vectorized loop each, the softmax as kernels::softmax_cpu computes it, the
// weighted sum of the values. Replaces two GEMM calls per head of a single row, whose call
// and packing overhead outweighed their work. `scratch` (the calling thread's) grows only.
void attend_row(const float* q, const float* const* rows, int64_t offset, int64_t value_offset, float* out,
                int64_t keys, int64_t heads, int64_t head_dim, std::vector<double>* scratch);

// return_alignments: the key (source position) that the query row's attention weighs most,
// its probabilities averaged over the heads (attend_row's arithmetic per head, the average in
// double); the first of equal maxima, as torch.argmax. Keys as attend_row reads them.
int attention_argmax(const float* q, const float* const* rows, int64_t offset, int64_t keys, int64_t heads,
                     int64_t head_dim, std::vector<double>* scratch);

}  // namespace nmt::cpu
