#pragma once
// Weight-only int8: a weight matrix W [rows, cols] (PyTorch's Linear.weight, y = x W^T)
// quantized per row (per output channel), symmetric, at load from the float checkpoint:
//   scale[r] = max_c |W[r, c]| / levels (1 for an all-zero row), q[r, c] = round(W[r, c] / scale[r])
// clamped to [-levels, levels], rounding to nearest even (lrintf). One scheme for both engines:
// the CPU's int8 GEMM (model/cpu/gemm.h: levels 127, or 63 without VNNI) and the CUDA engine's
// int8 projections (levels 127, below). docs/kernels.md, "Int8 weights".
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/small_gemm.h"
#include "kernels/stream.h"

#if NMT_WITH_CUDA
#include <cuda_fp16.h>
#endif

namespace nmt::kernels {

// q: rows * cols, scale: rows. levels in [1, 127].
void quantize_rows_int8(const float* w, int64_t rows, int64_t cols, int levels, int8_t* q, float* scale);
// w[r, c] = q[r, c] * scale[r]
void dequantize_rows_int8(const int8_t* q, const float* scale, int64_t rows, int64_t cols, float* w);

// The CUDA int8 projection's reference: y[m, n] = act(scale[n] * sum_k x[m, k] q[n, k] + bias[n])
// for m < rows, n < N; bias may be null, act null: none. Accumulates in double.
void int8_linear_cpu(const float* x, int64_t rows, const int8_t* q, const float* scale, const float* bias, int64_t n,
                     int64_t k, const Activation* act, float* y);

#if NMT_WITH_CUDA
// The decode step's projections at a few rows with int8 weights (q [n, k] row-major, scale
// [n] float32) and float16 activations: each warp streams 4 weight rows (columns of y) once for
// all of its block's rows, converting the int8 values to float in registers (float32
// accumulation); a batch-1 step reads every weight once, so half the bytes of float16 is what
// it is for. The first weight loads go out before the wait for the previous kernel
// (programmatic dependent launch, kernels/cuda/common.cuh). A block: 4 warps, 16 columns, a tile
// of 4 rows (up to 4) or 8 (more), up to kInt8GemvRows rows in tiles. `norm`: small_gemm.h's
// LayerNorm prologue, each block normalizing its rows into shared memory (k up to
// kInt8GemvNormK). y is __half (bias and activation optional) or float32 (the logits, neither).
// Its weak spot (bench/history/engine-cuda.md, run 57, ncu): the 1024-column projections (out_proj, fc2) get 256 warps, each
// walking K alone, and ran at 0.2 TB/s; docs/kernels.md says what is next.
constexpr int kInt8GemvRows = 64;
constexpr int kInt8GemvNormK = 1024;
// The rows up to which the CUDA engine calls the int8 GEMV (more: int8_dequantize_cuda and
// cuBLAS): kInt8GemvDefaultRows, or the environment's NMT_CUDA_INT8_GEMV_ROWS (0-64, for
// measuring the crossover). The GEMV's float32 FMAs grow with the rows while its weight bytes do
// not: at 64 rows (NLLB-600M batch 16, beam 4) its step took 5.59 ms against 1.47 through cuBLAS,
// at 4 rows it is the faster (bench/history/engine-cuda.md, run 57).
constexpr int kInt8GemvDefaultRows = 8;
int int8_gemv_rows();
// rows in [1, kInt8GemvRows], k a multiple of 16, x, ldx, q, k and bias 16-byte aligned (ldx in
// elements a multiple of 8); with norm, k <= kInt8GemvNormK and its pointers 16-byte aligned.
bool int8_gemv_supported(const __half* x, int64_t ldx, const int8_t* q, const __half* bias, int rows, int k,
                         const SmallGemmNorm<__half>* norm = nullptr);
void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, const __half* bias, __half* y,
                    int64_t ldy, int rows, int n, int k, const Activation* act, cudaStream_t stream,
                    const SmallGemmNorm<__half>* norm = nullptr);
void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, float* y, int64_t ldy,
                    int rows, int n, int k, cudaStream_t stream, const SmallGemmNorm<__half>* norm = nullptr);

// More rows (the encoder, large batches): w [n, k] = q * scale in float16 (rows n of the weight
// matrix), for a cuBLAS GEMM after it.
void int8_dequantize_cuda(const int8_t* q, const float* scale, int64_t n, int64_t k, __half* w, cudaStream_t stream);
#endif

}  // namespace nmt::kernels
