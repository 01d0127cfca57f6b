// The int8 weight quantizer both engines share (kernels/quantize.h) and the CUDA int8
// projection's CPU reference: the scales, the dequantized weights against the originals, and
// the edge cases (an all-zero row, a row's extremes, ties, values far below the row's scale).
#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace nmt::kernels
