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

// FP8 weights (precision fp8, compute capability 8.9+): e4m3 (1 sign, 4 exponent bits of bias
// 7, 3 mantissa bits; largest 448, no infinity) per row, symmetric, scale[r] = max_c |W[r, c]|
// / 448 (1 for an all-zero row), q[r, c] = e4m3(W[r, c] / scale[r]) rounded to nearest even,
// saturating; the CUDA engine's kernels convert e4m3 to float16 exactly in registers.
constexpr float kE4m3Max = 448.f;
uint8_t float_to_e4m3(float v);
float e4m3_to_float(uint8_t b);
void quantize_rows_e4m3(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scale);
void dequantize_rows_e4m3(const uint8_t* q, const float* scale, int64_t rows, int64_t cols, float* w);

// The CUDA int8 projection's reference: y[m, n] = act(scale[n] * sum_k x[m, k] q[n, k] + bias[n])
// for m < rows, n < N; bias may be null, act null: none. Accumulates in double.
void int8_linear_cpu(const float* x, int64_t rows, const int8_t* q, const float* scale, const float* bias, int64_t n,
                     int64_t k, const Activation* act, float* y);

#if NMT_WITH_CUDA
// The decode step's projections at a few rows with int8 weights (q [n, k] row-major, scale
// [n] float32) and float16 activations. A block takes 16 weight rows (columns of y) and a tile
// of 8 rows (up to 8) or 16; its 8 warps split K in steps of 64, each lane loading 16 int8 of
// two weight rows at once (16-byte loads, 4 steps in flight), converting them to float16 pairs
// in registers (exact) and multiplying them on the tensor cores (mma m16n8k16, float32
// accumulation), so that rows 2-16 cost no more conversions than one; a batch-1 step reads
// every weight once, and half the bytes of float16 is what it is for. The first weight loads
// go out before the wait for the previous kernel (programmatic dependent launch,
// kernels/cuda/common.cuh). Up to kInt8GemvRows rows in tiles. `norm`: small_gemm.h's LayerNorm
// prologue, each block normalizing its rows into shared memory (k up to kInt8GemvNormK). y is
// __half (bias and activation optional) or float32 (the logits, neither). docs/kernels.md,
// "Int8 weights".
// The same kernels take e4m3 weights (precision fp8, WeightBytes::kE4m3: the bytes of q are
// e4m3, converted by cvt.rn.f16x2.e4m3x2, compute capability 8.9+); every int8_* function below
// with a `bytes` parameter does.
enum class WeightBytes { kInt8, kE4m3 };
constexpr int kInt8GemvRows = 64;
constexpr int kInt8GemvNormK = 1024;
// The rows up to which the CUDA engine calls the int8 GEMV (more: int8_gemm_mode()):
// kInt8GemvDefaultRows, or the environment's NMT_CUDA_INT8_GEMV_ROWS (0-64, for measuring the
// crossover).
constexpr int kInt8GemvDefaultRows = 64;
int int8_gemv_rows();
// rows in [1, kInt8GemvRows], k a multiple of 16, x, ldx, q, k and bias 16-byte aligned (ldx in
// elements a multiple of 8); with norm, k <= kInt8GemvNormK and its pointers 16-byte aligned.
bool int8_gemv_supported(const __half* x, int64_t ldx, const int8_t* q, const __half* bias, int rows, int k,
                         const SmallGemmNorm<__half>* norm = nullptr);
void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, const __half* bias, __half* y,
                    int64_t ldy, int rows, int n, int k, const Activation* act, cudaStream_t stream,
                    const SmallGemmNorm<__half>* norm = nullptr, WeightBytes bytes = WeightBytes::kInt8);
void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, float* y, int64_t ldy,
                    int rows, int n, int k, cudaStream_t stream, const SmallGemmNorm<__half>* norm = nullptr,
                    WeightBytes bytes = WeightBytes::kInt8);

// More rows (the encoder, large batches), as the environment's NMT_CUDA_INT8_GEMM says:
// kDequantize (the default, "dequantize"): the weights dequantized to float16 chunk by chunk
// (int8_dequantize_cuda), then cuBLAS's float16 GEMM; kTensorCores ("tensor-cores"): the
// activations quantized per row on the fly with the weights' scheme (int8_quantize_rows_cuda),
// then for int8 cuBLAS's int8 x int8 -> int32 GEMM (IMMA) and int8_rescale_cuda, for e4m3
// cuBLASLt's FP8 GEMM with the scales in its epilogue (e4m3_gemm_cublaslt). The tensor-core
// form took 2.24 ms a step on the NLLB-600M shape at batch 64 (256 rows), the dequantization
// 1.94 in an earlier run (bench/history/engine-cuda.md, runs 59 and 57): not the default until
// a profile says why.
enum class Int8GemmMode { kTensorCores, kDequantize };
Int8GemmMode int8_gemm_mode();
// q[r, :], scale[r] = quantize_rows_int8(x[r, :], levels 127) (or quantize_rows_e4m3) for
// r < rows, bit for bit (x float16 with row stride ldx; k and ldx multiples of 8, x 16-byte and
// q 8-byte aligned).
void int8_quantize_rows_cuda(const __half* x, int64_t ldx, int rows, int k, int8_t* q, float* scale,
                             cudaStream_t stream, WeightBytes bytes = WeightBytes::kInt8);
// y[m, j] = act(acc[m, j] xscale[m] wscale[j] + bias[j]) (bias, act optional) for cuBLAS's
// int32 products, into __half or float32 y (the float32 form may write over acc: the logits
// buffer holding the products). Instantiated for TY __half and float.
template <typename TY>
void int8_rescale_cuda(const int32_t* acc, int64_t ldacc, const float* xscale, const float* wscale,
                       const __half* bias, const Activation* act, TY* y, int64_t ldy, int rows, int n,
                       cudaStream_t stream);
// y[i, j] = relu?(xscale[i] wscale[j] sum_k x[i, k] w[j, k] + bias[j]) for e4m3 w [n, k] and
// x [m, k] (row-major, the per-row scales of quantize_rows_e4m3), through cuBLASLt's FP8 GEMM
// with outer-vector scaling: scales, bias and ReLU in its epilogue, y (TY __half, or float32
// for the logits; row stride ldy) written once. bias optional (relu needs it); k a multiple
// of 16, the pointers and ldy's bytes 16-byte aligned; one cuBLASLt handle a process, no
// workspace. false, with nothing launched, where cuBLASLt takes no such GEMM for the shape.
template <typename TY>
bool e4m3_gemm_cublaslt(const int8_t* w, const float* wscale, const int8_t* x, const float* xscale, int n, int m,
                        int k, const __half* bias, bool relu, TY* y, int64_t ldy, cudaStream_t stream);
// w [n, k] = q * scale in float16 (rows n of the weight matrix), for a cuBLAS GEMM after it.
void int8_dequantize_cuda(const int8_t* q, const float* scale, int64_t n, int64_t k, __half* w, cudaStream_t stream,
                          WeightBytes bytes = WeightBytes::kInt8);
#endif

}  // namespace nmt::kernels
