#pragma once
// Dense projection of a few rows, the shape of a decode step at small batches:
//   y[m, n] = act(sum_k x[m, k] * w[n, k] + bias[n])      m < rows <= small_gemm_max_rows<T>()
// with w row-major [N, K] (PyTorch's Linear.weight), float32 accumulation, bias and activation
// optional. The weights stream through once per call for all the rows, and the bias +
// activation epilogue replaces a separate bias_activation launch: float32 with one warp per
// output column (a few splitting K when K is long), 16-bit types on tensor cores with a block
// per 8 columns (its warps splitting K; 16 or 32 where blocks of 8 would take more than one
// wave). For more rows cuBLAS's tiled kernels win: callers
// switch.
#include <cstddef>
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/stream.h"

namespace nmt::kernels {

// Float: up to 8 rows (a decode step of 2 sentences of beam 4). At 9-16 rows cuBLAS's tiles
// with a LayerNorm launch of their own were faster than the float32-FMA kernel in the engine
// (end-to-end run 30 on an H100: Transformer-base batch 4, 16 rows, 6.9k -> 11.6k target
// tokens/s, the step's GPU time 575 -> 338 us; the demo model's batch 4 +37%): its
// accumulators and normalized rows took enough registers that a projection's blocks no longer
// fit one wave beside the previous kernel's. 16-bit types run on tensor cores, where rows 9-16
// fill the MMA's other half at no cost in instructions and rows 17-32 take a second MMA on the
// same weights: up to 32 rows (8 sentences of beam 4).
constexpr int kSmallGemmRows = 8;
constexpr int kSmallGemmRows16Bit = 32;
template <typename T>
constexpr int small_gemm_max_rows() {
  return sizeof(T) == 2 ? kSmallGemmRows16Bit : kSmallGemmRows;
}

// The residual of a decode step, taken into the small GEMM's prologue: the GEMM's input rows
// become LN(z), z = x + residual + bias (kernels/layer_norm.h's semantics; the mean and
// variance in two passes over the row held in registers). Post-norm layers write LN(z) to
// `out` as the next sublayer's residual; pre-norm layers (store_sum) write z itself, the
// residual stream that their sublayers read normalized. Each block normalizes the few rows
// itself into shared memory, so the LayerNorm needs no launch of its own and no grid-wide
// barrier (the first block alone writes `out`).
template <typename T>
struct SmallGemmNorm {
  const T* residual = nullptr;  // [rows, ldx], may be null
  const T* bias = nullptr;      // [k], may be null
  const T* gamma = nullptr;     // [k]
  const T* beta = nullptr;      // [k]
  float eps = 1e-5f;
  // [rows, ldx]: neither x nor residual (other blocks still read them); null: nothing written
  // (a pre-norm sublayer's input with no sum pending, the final LayerNorm before the logits)
  T* out = nullptr;
  bool store_sum = false;  // out receives z, not LN(z)
};

// With a SmallGemmNorm each lane holds its share of a row in registers: K up to this many
// 16-byte packs a lane (32 lanes), 1024 in 16-bit types and 512 in float; and each block keeps
// the normalized rows in shared memory: rows x K elements within kSmallGemmNormBytes (32 rows
// of K 512 in 16-bit types, 16 of K 1024).
constexpr int kSmallGemmNormPacks = 4;
constexpr size_t kSmallGemmNormBytes = 32 * 1024;

#if NMT_WITH_CUDA
// Whether small_gemm_cuda takes this shape: 1 <= rows <= small_gemm_max_rows<T>(), and k, ldx
// and ldy whole 16-byte packs of T with 16-byte aligned x, w and bias (y needs only T's
// alignment);
// with `norm`, also its pointers 16-byte aligned, k within kSmallGemmNormPacks packs a lane and
// rows x k within kSmallGemmNormBytes.
template <typename T>
bool small_gemm_supported(const T* x, int64_t ldx, const T* w, const T* bias, int64_t ldy,
                          int rows, int k, const SmallGemmNorm<T>* norm = nullptr);

// act == nullptr: no activation; norm == nullptr: x is the input as it is. All pointers are
// device pointers; bias may be null. Throws std::invalid_argument for a shape
// small_gemm_supported rejects, or a norm.out that is x or residual.
template <typename T>
void small_gemm_cuda(const T* x, int64_t ldx, const T* w, const T* bias, T* y, int64_t ldy,
                     int rows, int n, int k, const Activation* act, cudaStream_t stream,
                     const SmallGemmNorm<T>* norm = nullptr);

// The output projection of a decode step at batch 1: y[m, n] = float32(x[m, :] . w[n, :]) for
// m < rows <= kSmallGemmLogitsRows and n < N, N the vocabulary (tens of thousands of columns),
// with small_gemm_cuda's optional LayerNorm prologue and K up to kSmallGemmLogitsPacks 16-byte
// packs a lane (small_gemm_logits_supported). One persistent block an SM normalizes the rows
// once; a warp owns groups of columns and reads the next group's weights while it multiplies
// the current one: in float32 groups of 32 / 4 columns on FMAs, in 16-bit types groups of 8 on
// tensor cores (each lane holding its share of the group's K). Against cuBLAS after a LayerNorm launch it saves that
// launch and lets the top-k start under programmatic dependent launch: the demo model's batch-1
// p50 5-9% lower in three rounds of four, Transformer-base's step the same (its 58101 x 512
// weights: 21.7 us alone against cuBLAS's 19.9, end-to-end run 35). At 8 rows it was 3%
// slower: cuBLAS keeps them.
constexpr int kSmallGemmLogitsRows = 4;
constexpr int kSmallGemmLogitsPacks = 4;
template <typename T>
bool small_gemm_logits_supported(const T* x, int64_t ldx, const T* w, int64_t ldy, int rows, int k,
                                 const SmallGemmNorm<T>* norm = nullptr);
template <typename T>
void small_gemm_logits_cuda(const T* x, int64_t ldx, const T* w, float* y, int64_t ldy, int rows,
                            int n, int k, cudaStream_t stream, const SmallGemmNorm<T>* norm = nullptr);
#endif

}  // namespace nmt::kernels
