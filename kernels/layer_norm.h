#pragma once
// LayerNorm over the last dimension with the residual add and bias fused into the load:
//   y[r, :] = (z - mean(z)) / sqrt(var(z) + eps) * gamma + beta,  z = x[r, :] + residual[r, :] + bias
// residual and bias may be null. Statistics use Welford's algorithm in float32.
#include <cstdint>

#include "kernels/stream.h"

namespace nmt::kernels {

void layer_norm_cpu(const float* x, const float* residual, const float* bias, const float* gamma,
                    const float* beta, float* y, int64_t rows, int64_t cols, float eps,
                    float* mean = nullptr, float* inv_std = nullptr);

#if NMT_WITH_CUDA
// T = float, __half or __nv_bfloat16. mean / inv_std (float, one per row) are optional outputs;
// so is sum, [rows, cols]: z itself (a pre-norm layer's residual stream, whose sublayer reads
// y), neither x, residual nor y.
template <typename T>
void layer_norm_cuda(const T* x, const T* residual, const T* bias, const T* gamma, const T* beta,
                     T* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream,
                     float* mean = nullptr, float* inv_std = nullptr, T* sum = nullptr);
#endif

}  // namespace nmt::kernels
