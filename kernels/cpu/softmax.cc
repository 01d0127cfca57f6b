#include "kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nmt::kernels {

void softmax_cpu(const float* x, float* y, int64_t rows, int64_t cols, const SoftmaxOptions& opt) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const int64_t valid = softmax_valid_cols(r, cols, opt.key_lengths, opt);
    float max_v = neg_inf;
    for (int64_t c = 0; c < valid; ++c) max_v = std::max(max_v, xr[c] * opt.scale);
    double sum = 0.0;
    for (int64_t c = 0; c < valid; ++c) sum += std::exp(double(xr[c] * opt.scale - max_v));
    if (opt.log) {
      const float log_sum = float(std::log(sum)) + max_v;
      for (int64_t c = 0; c < cols; ++c) yr[c] = c < valid ? xr[c] * opt.scale - log_sum : neg_inf;
    } else {
      for (int64_t c = 0; c < cols; ++c)
        yr[c] = c < valid ? float(std::exp(double(xr[c] * opt.scale - max_v)) / sum) : 0.f;
    }
  }
}

}  // namespace nmt::kernels
