#pragma once
// Elementwise fusions of the Transformer forward pass and the beam search: embedding lookup
// with scale and position, bias add, KV-cache append, beam reorder (row gather), type
// conversion. Bias + activation lives in activation.h, bias + residual is fused into
// layer_norm.h's load.
#include <cstdint>

#include "kernels/stream.h"

namespace nmt::kernels {

// out[r, :] = embeddings[ids[r], :] * scale + positions_table[positions[r], :]
// (positions_table may be null: no position term).
void embed_positions_cpu(const int* ids, const float* embeddings, const float* positions_table,
                         const int* positions, float* out, int64_t rows, int d_model,
                         float scale);
// x[r, c] += bias[c]
void add_bias_cpu(float* x, const float* bias, int64_t rows, int64_t cols);
// dst[r * dst_row_stride + c] = src[index[r] * src_row_stride + c] for c < row_elems
void gather_rows_cpu(const float* src, float* dst, const int* index, int64_t rows,
                     int64_t src_row_stride, int64_t dst_row_stride, int64_t row_elems);
// k_cache[(r * max_len + step) * d_model + c] = k_new[r * new_row_stride + c] (same for v)
void kv_append_cpu(const float* k_new, const float* v_new, int64_t new_row_stride,
                   float* k_cache, float* v_cache, int64_t rows, int64_t step, int64_t max_len,
                   int64_t d_model);

#if NMT_WITH_CUDA
// T = float, __half or __nv_bfloat16 for all of these; index/ids/positions are device ints.
template <typename T>
void embed_positions_cuda(const int* ids, const T* embeddings, const T* positions_table,
                          const int* positions, T* out, int64_t rows, int d_model, float scale,
                          cudaStream_t stream);
template <typename T>
void add_bias_cuda(T* x, const T* bias, int64_t rows, int64_t cols, cudaStream_t stream);
template <typename T>
void gather_rows_cuda(const T* src, T* dst, const int* index, int64_t rows,
                      int64_t src_row_stride, int64_t dst_row_stride, int64_t row_elems,
                      cudaStream_t stream);
template <typename T>
void kv_append_cuda(const T* k_new, const T* v_new, int64_t new_row_stride, T* k_cache,
                    T* v_cache, int64_t rows, int64_t step, int64_t max_len, int64_t d_model,
                    cudaStream_t stream);
// dst[i] = To(src[i]) for n elements; From/To among float, __half, __nv_bfloat16.
template <typename From, typename To>
void convert_cuda(const From* src, To* dst, int64_t n, cudaStream_t stream);
#endif

}  // namespace nmt::kernels
