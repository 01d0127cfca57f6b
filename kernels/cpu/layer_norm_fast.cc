#include "kernels/cpu/layer_norm_fast.h"

#include <cmath>

#include "kernels/cpu/vector_math.h"

namespace nmt::cpu {
namespace {

// z = LN(x + z) (kResidual) or z = LN(x) of one row; inlined into each clone below.
template <bool kResidual>
__attribute__((always_inline)) inline void layer_norm_row(const float* x, float* z, const float* gamma,
                                                          const float* beta, int64_t cols, float eps) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cols; ++c) {
    z[c] = kResidual ? x[c] + z[c] : x[c];
    sum += double(z[c]);
  }
  const double mean = sum / double(cols);
  double m2 = 0.0;
#pragma omp simd reduction(+ : m2)
  for (int64_t c = 0; c < cols; ++c) {
    const double dev = double(z[c]) - mean;
    m2 += dev * dev;
  }
  const double inv_std = 1.0 / std::sqrt(m2 / double(cols) + double(eps));
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) z[c] = float((double(z[c]) - mean) * inv_std) * gamma[c] + beta[c];
}

NMT_CPU_CLONES void add_layer_norm_row(const float* x, float* z, const float* gamma, const float* beta, int64_t cols,
                                       float eps) {
  layer_norm_row<true>(x, z, gamma, beta, cols, eps);
}

NMT_CPU_CLONES void plain_layer_norm_row(const float* x, float* z, const float* gamma, const float* beta,
                                         int64_t cols, float eps) {
  layer_norm_row<false>(x, z, gamma, beta, cols, eps);
}

}  // namespace

void add_layer_norm(const float* x, float* y, const float* gamma, const float* beta, int64_t rows, int64_t cols,
                    float eps) {
  // A team costs a wake-up of the sleeping threads: only for the encoder's many rows.
#pragma omp parallel for if (rows * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < rows; ++r) add_layer_norm_row(x + r * cols, y + r * cols, gamma, beta, cols, eps);
}

void layer_norm(const float* x, float* y, const float* gamma, const float* beta, int64_t rows, int64_t cols,
                float eps) {
#pragma omp parallel for if (rows * cols >= (int64_t(1) << 16))
  for (int64_t r = 0; r < rows; ++r) plain_layer_norm_row(x + r * cols, y + r * cols, gamma, beta, cols, eps);
}

}  // namespace nmt::cpu
