#pragma once
// The CPU engine's residual LayerNorm, y = LN(x + y) * gamma + beta per row, vectorized: the
// statistics in double in two passes (sum, then squared deviations) where the reference
// kernels::layer_norm_cpu runs Welford's recurrence, which no compiler vectorizes. Both are
// exact to far below float rounding; the output is formed as the reference forms it.
#include <cstdint>

namespace nmt::cpu {

void add_layer_norm(const float* x, float* y, const float* gamma, const float* beta, int64_t rows, int64_t cols,
                    float eps);

}  // namespace nmt::cpu
