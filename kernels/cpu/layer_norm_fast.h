#pragma once
// The CPU engine's fast path for LayerNorm, beside its reference (kernels/cpu/layer_norm.cc):
// y = LN(x + y) * gamma + beta per row (residual) or LN(x), vectorized: the statistics in
// double in two passes (sum, then squared deviations) where the reference
// kernels::layer_norm_cpu runs Welford's recurrence, which no compiler vectorizes. Both are
// exact to far below float rounding; the output is formed as the reference forms it.
#include <cstdint>

namespace nmt::cpu {

void add_layer_norm(const float* x, float* y, const float* gamma, const float* beta, int64_t rows, int64_t cols,
                    float eps);
// y = LN(x) * gamma + beta per row (pre-norm layers' inputs, final and embedding norms); y may
// be x.
void layer_norm(const float* x, float* y, const float* gamma, const float* beta, int64_t rows, int64_t cols,
                float eps);

}  // namespace nmt::cpu
