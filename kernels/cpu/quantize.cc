#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace nmt::kernels {

void quantize_rows_int8(const float* w, int64_t rows, int64_t cols, int levels, int8_t* q, float* scale) {
  if (levels < 1 || levels > 127) throw std::invalid_argument("quantize_rows_int8: levels must be in [1, 127]");
  const float l = float(levels);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    // An all-zero row (the output projection's padding, kernels/small_gemm.h's logits stride)
    // keeps scale 1: its q are 0 and dequantize to 0, with no division by zero.
    const float s = amax > 0.f ? amax / l : 1.f;
    scale[r] = s;
    int8_t* out = q + r * cols;
    // Division, not a multiplication by 1/s: the element at max |w| lands on exactly +-levels.
    for (int64_t c = 0; c < cols; ++c) out[c] = int8_t(std::lrintf(std::clamp(row[c] / s, -l, l)));
  }
}

void dequantize_rows_int8(const int8_t* q, const float* scale, int64_t rows, int64_t cols, float* w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = float(q[r * cols + c]) * scale[r];
}

void int8_linear_cpu(const float* x, int64_t rows, const int8_t* q, const float* scale, const float* bias, int64_t n,
                     int64_t k, const Activation* act, float* y) {
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += double(x[m * k + i]) * double(q[j * k + i]);
      y[m * n + j] = float(acc * double(scale[j])) + (bias ? bias[j] : 0.f);
    }
  }
  if (act) bias_activation_cpu(y, nullptr, rows, n, *act);
}

}  // namespace nmt::kernels
