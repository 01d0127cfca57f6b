#pragma once
// Dense projection of a few rows, the shape of a decode step at small batches:
//   y[m, n] = act(sum_k x[m, k] * w[n, k] + bias[n])      m < rows <= kSmallGemmRows
// with w row-major [N, K] (PyTorch's Linear.weight), float32 accumulation, bias and activation
// optional. One warp per output column reads that column's weight row once for all the rows,
// so the weights stream through once per call, and the bias + activation epilogue replaces a
// separate bias_activation launch. For more rows cuBLAS's tiled kernels win: callers switch.
#include <cstdint>

#include "kernels/activation.h"
#include "kernels/stream.h"

namespace nmt::kernels {

constexpr int kSmallGemmRows = 16;

#if NMT_WITH_CUDA
// Whether small_gemm_cuda takes this shape: 1 <= rows <= kSmallGemmRows, and k, ldx and ldy
// whole 16-byte packs of T with 16-byte aligned x, w and bias (y needs only T's alignment).
template <typename T>
bool small_gemm_supported(const T* x, int64_t ldx, const T* w, const T* bias, int64_t ldy,
                          int rows, int k);

// act == nullptr: no activation. All pointers are device pointers; bias may be null. Throws
// std::invalid_argument for a shape small_gemm_supported rejects.
template <typename T>
void small_gemm_cuda(const T* x, int64_t ldx, const T* w, const T* bias, T* y, int64_t ldy,
                     int rows, int n, int k, const Activation* act, cudaStream_t stream);
#endif

}  // namespace nmt::kernels
