#include "kernels/layer_norm.h"

#include <cmath>
#include <vector>

namespace nmt::kernels {

void layer_norm_cpu(const float* x, const float* residual, const float* bias, const float* gamma,
                    const float* beta, float* y, int64_t rows, int64_t cols, float eps,
                    float* mean_out, float* inv_std_out) {
  std::vector<float> z(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    const float* rr = residual ? residual + r * cols : nullptr;
    // Welford: numerically stable in one pass, the same recurrence the CUDA kernels use.
    double mean = 0.0, m2 = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      float v = xr[c] + (rr ? rr[c] : 0.f) + (bias ? bias[c] : 0.f);
      z[c] = v;
      double delta = v - mean;
      mean += delta / double(c + 1);
      m2 += delta * (v - mean);
    }
    const double inv_std = 1.0 / std::sqrt(m2 / double(cols) + double(eps));
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = float((z[c] - mean) * inv_std) * (gamma ? gamma[c] : 1.f) + (beta ? beta[c] : 0.f);
    }
    if (mean_out) mean_out[r] = float(mean);
    if (inv_std_out) inv_std_out[r] = float(inv_std);
  }
}

}  // namespace nmt::kernels
