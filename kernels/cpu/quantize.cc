#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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

uint8_t float_to_e4m3(float v) {
  // On the float's bits: loading a model quantizes every weight through here, and the
  // frexp/ldexp form took several times as long (a second of load per ~10M weights).
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign;                     // NaN (which no weight is): zero
  if (u >= 0x43e00000u) return uint8_t(sign | 0x7eu);   // >= 448: saturate (0x7f is NaN, no infinity)
  if (u < 0x3c800000u) {                                // below 2^-6: subnormal, m 2^-9
    float a;
    std::memcpy(&a, &u, sizeof a);
    // a * 512 is exact; nearbyint under the default mode rounds half to even, as the GPU's
    // cvt.rn.satfinite. 8 is 2^-6, the first normal code.
    return uint8_t(sign | uint8_t(std::nearbyint(a * 512.f)));
  }
  // Normal: round the 23 mantissa bits to 3, half to even (a carry moves into the exponent),
  // then rebias the exponent from 127 to 7. Below 448 nothing rounds past 0x7e.
  u += 0x7ffffu + ((u >> 20) & 1u);
  return uint8_t(sign | (((u >> 23) - 120u) << 3) | ((u >> 20) & 7u));
}

float e4m3_to_float(uint8_t b) {
  const int exp = (b >> 3) & 15, mant = b & 7;
  const float mag = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(1.f + float(mant) / 8.f, exp - 7);
  return b & 0x80 ? -mag : mag;
}

void quantize_rows_e4m3(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float s = amax > 0.f ? amax / kE4m3Max : 1.f;  // an all-zero row: as quantize_rows_int8
    scale[r] = s;
    for (int64_t c = 0; c < cols; ++c) q[r * cols + c] = float_to_e4m3(row[c] / s);
  }
}

void dequantize_rows_e4m3(const uint8_t* q, const float* scale, int64_t rows, int64_t cols, float* w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = e4m3_to_float(q[r * cols + c]) * scale[r];
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
