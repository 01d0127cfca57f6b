#pragma once
// The CPU engine's matrix products and its thread count: oneDNN's GEMMs (the library
// CTranslate2 uses on the CPU), threaded with OpenMP inside the one decode loop.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/cpu/packed_matrix.h"

namespace nmt::cpu {

// Threads of the CPU engine's GEMMs and row loops from here on, on the calling thread
// (OpenMP keeps the count per thread); 0 = all cores.
void set_threads(int threads);

// Row-major C [m, n] = alpha * A [m, k] * op(B) + beta * C, op(B) = B^T ([n, k]) when
// trans_b, else B ([k, n]).
void sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The int8 weights' range, [-levels, levels]: 127 where oneDNN's int8 kernels use VNNI, which
// adds the products in int32. Without it they add pairs of u8 x s8 products in int16 first
// (vpmaddubsw), which saturates once a pair passes 32767 (255 x 127 x 2 = 64770 can): 7-bit
// weights (63: 255 x 63 x 2 = 32130) never reach it, as oneDNN advises for those CPUs.
int int8_weight_levels();

// A weight matrix W [rows, cols] quantized per row, symmetric: W[r, c] ~ q[r, c] * scale[r],
// q in [-int8_weight_levels(), int8_weight_levels()] (made at load from the float checkpoint).
struct QuantizedMatrix {
  std::vector<int8_t> q;
  std::vector<float> scale;
  int64_t rows = 0, cols = 0;
  std::shared_ptr<const PackedMatrix> packed;  // q for oneDNN's matmul; null: the plain int8 GEMM
  static QuantizedMatrix quantize(const float* w, int64_t rows, int64_t cols);
  size_t bytes() const {  // host memory held: q, the scales and the packed copy
    return q.capacity() + scale.capacity() * sizeof(float) + (packed ? packed->bytes() : 0);
  }
};

// y [m, w.rows] = x [m, w.cols] W^T + bias through an int8 GEMM with int32 accumulation: each
// row of x is quantized on the fly (symmetric, its own scale), the product dequantized to
// float; bias may be null (none). The scratch buffers are the calling thread's own and grow only.
void int8_linear(const float* x, int64_t m, const QuantizedMatrix& w, const float* bias, float* y);

}  // namespace nmt::cpu
