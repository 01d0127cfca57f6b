// The int8 weight quantizer both engines share (kernels/quantize.h), the CUDA engine's e4m3
// (fp8) quantizer, and the CUDA int8 projection's CPU reference: the scales, the dequantized
// weights against the originals, and the edge cases (an all-zero row, a row's extremes, ties,
// values far below the row's scale, e4m3's codes and saturation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/quantize.h"

namespace nmt::kernels {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 0.05f);
  std::vector<float> w(size_t(rows * cols));
  for (float& v : w) v = dist(gen);
  return w;
}

TEST(Int8Quantizer, ScalesAndDequantizedWeightsWithinHalfAStep) {
  const int64_t rows = 37, cols = 301;
  for (int levels : {127, 63}) {
    const auto w = random_matrix(rows, cols, 5);
    std::vector<int8_t> q(w.size());
    std::vector<float> scale(rows), back(w.size());
    quantize_rows_int8(w.data(), rows, cols, levels, q.data(), scale.data());
    dequantize_rows_int8(q.data(), scale.data(), rows, cols, back.data());
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      EXPECT_FLOAT_EQ(scale[r], amax / float(levels)) << "row " << r;
      int top = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        EXPECT_LE(std::abs(int(q[i])), levels);
        // Round to nearest: the error is at most half a step (and a float rounding).
        EXPECT_LE(std::fabs(back[i] - w[i]), 0.5f * scale[r] * (1 + 1e-5f)) << "row " << r << " col " << c;
        top = std::max(top, std::abs(int(q[i])));
      }
      EXPECT_EQ(top, levels) << "the row's largest |w| takes the full range, row " << r;
    }
  }
}

TEST(Int8Quantizer, ZeroRowExtremesAndTies) {
  const int64_t cols = 6;
  // Row 0: all zero. Row 1: one large value, others far below half a step (quantized to 0),
  // its negative extreme. Row 2: ties at exactly x.5 steps (127 * 0.5 / 127 etc.), rounded to
  // even. Row 3: the largest float magnitudes.
  const float big = 3.0e38f;
  const std::vector<float> w = {0, 0, 0, 0, 0, 0,
                                -254.f, 1e-3f, -1e-3f, 0.99f, 1.01f, 254.f,
                                127.f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f,
                                big, -big, big / 4, 0, -big / 127, 1e-30f};
  const int64_t rows = int64_t(w.size()) / cols;
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(rows), back(w.size());
  quantize_rows_int8(w.data(), rows, cols, 127, q.data(), scale.data());
  dequantize_rows_int8(q.data(), scale.data(), rows, cols, back.data());
  EXPECT_EQ(scale[0], 1.f);  // no division by zero: q 0, dequantized 0
  for (int c = 0; c < cols; ++c) {
    EXPECT_EQ(q[c], 0);
    EXPECT_EQ(back[c], 0.f);
  }
  EXPECT_EQ(scale[1], 2.f);
  EXPECT_EQ((std::vector<int8_t>(q.begin() + 6, q.begin() + 12)), (std::vector<int8_t>{-127, 0, 0, 0, 1, 127}));
  EXPECT_EQ(scale[2], 1.f);
  EXPECT_EQ((std::vector<int8_t>(q.begin() + 12, q.begin() + 18)), (std::vector<int8_t>{127, 0, 2, 2, -2, 0}));
  EXPECT_FLOAT_EQ(scale[3], big / 127);
  EXPECT_EQ((std::vector<int8_t>(q.begin() + 18, q.begin() + 24)), (std::vector<int8_t>{127, -127, 32, 0, -1, 0}));
  for (float v : back) EXPECT_TRUE(std::isfinite(v));
  EXPECT_THROW(quantize_rows_int8(w.data(), rows, cols, 0, q.data(), scale.data()), std::invalid_argument);
  EXPECT_THROW(quantize_rows_int8(w.data(), rows, cols, 128, q.data(), scale.data()), std::invalid_argument);
}

TEST(Int8Quantizer, LinearReferenceIsTheDequantizedProduct) {
  const int64_t rows = 5, n = 19, k = 48;
  const auto w = random_matrix(n, k, 7), x = random_matrix(rows, k, 8), bias = random_matrix(1, n, 9);
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(n), back(w.size()), y(size_t(rows * n));
  quantize_rows_int8(w.data(), n, k, 127, q.data(), scale.data());
  dequantize_rows_int8(q.data(), scale.data(), n, k, back.data());
  const Activation relu = Activation::kRelu;
  int8_linear_cpu(x.data(), rows, q.data(), scale.data(), bias.data(), n, k, &relu, y.data());
  int positive = 0;
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t j = 0; j < n; ++j) {
      double ref = bias[j];
      for (int64_t i = 0; i < k; ++i) ref += double(x[m * k + i]) * back[j * k + i];
      ref = std::max(ref, 0.0);
      positive += ref > 0;
      EXPECT_NEAR(y[m * n + j], ref, 1e-6) << m << ", " << j;
    }
  EXPECT_GT(positive, 0);
  EXPECT_LT(positive, rows * n);  // the activation cut some
}

// e4m3 (precision fp8): every finite code round-trips, ties go to even (normal and subnormal),
// magnitudes past 448 saturate, and a row's quantization stays within half a step of e4m3's
// relative spacing (2^-4) of its scale.
TEST(E4m3Quantizer, CodesTiesSaturationAndRows) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(int(float_to_e4m3(e4m3_to_float(uint8_t(b)))), b) << "code " << b;
  }
  EXPECT_EQ(e4m3_to_float(0x38), 1.f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // halfway 1 .. 1.125: even
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);  // halfway 1.125 .. 1.25: even
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.f, -10)), 0x02);
  EXPECT_EQ(float_to_e4m3(1000.f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-1000.f), 0xfe);
  EXPECT_EQ(float_to_e4m3(464.f), 0x7e);
  EXPECT_EQ(float_to_e4m3(std::nanf("")), 0x00);
  // Nearest with ties to even over a sweep of float32 bit patterns in [0, 448] (both signs):
  // no neighbouring code is nearer, and a tie takes the even code.
  for (uint32_t u = 0; u <= 0x43e00000u; u += 4099) {
    float v;
    std::memcpy(&v, &u, sizeof v);
    for (const float x : {v, -v}) {
      const int q = float_to_e4m3(x), m = q & 0x7f;
      const float d = std::fabs(x - e4m3_to_float(uint8_t(q)));
      for (const int n : {m - 1, m + 1}) {
        if (n < 0 || n > 0x7e) continue;
        const float dn = std::fabs(x - e4m3_to_float(uint8_t((q & 0x80) | n)));
        ASSERT_LE(d, dn) << "value " << x << " code " << q << " neighbour " << n;
        if (d == dn) ASSERT_EQ(m % 2, 0) << "tie at " << x << " not to even: " << q;
      }
    }
  }
  const int64_t rows = 9, cols = 301;
  auto w = random_matrix(rows, cols, 21);
  for (int64_t c = 0; c < cols; ++c) w[size_t(4 * cols + c)] = 0.f;
  std::vector<uint8_t> q(w.size());
  std::vector<float> scale(rows), back(w.size());
  quantize_rows_e4m3(w.data(), rows, cols, q.data(), scale.data());
  dequantize_rows_e4m3(q.data(), scale.data(), rows, cols, back.data());
  EXPECT_EQ(scale[4], 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[size_t(r * cols + c)]));
    if (r != 4) EXPECT_FLOAT_EQ(scale[r], amax / kE4m3Max) << "row " << r;
    bool top = false;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const float a = std::fabs(w[i]) / scale[r];
      const float half_step = a < std::ldexp(1.f, -6) ? std::ldexp(1.f, -10) : std::ldexp(a, -4);
      EXPECT_LE(std::fabs(back[i] - w[i]), half_step * scale[r] * (1 + 1e-5f)) << "row " << r << " col " << c;
      top = top || (q[i] & 0x7f) == 0x7e;
    }
    EXPECT_EQ(top, r != 4) << "the row's largest |w| is 448, row " << r;
  }
}

}  // namespace
}  // namespace nmt::kernels
