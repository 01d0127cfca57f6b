#pragma once
// A float32 weight matrix reordered once, at load, into the blocked layout oneDNN's matmul
// reads fastest on this CPU. dnnl_sgemm repacks its weight operand at every call: with the
// decode step's few rows (a batch's beams) that repacking is a sizeable part of each GEMM
// (profile of issue 16: 10-25% of a GEMM's time at 37-128 rows, most at the fewest).
#include <cstdint>
#include <memory>

namespace nmt::cpu {

class PackedMatrix {
 public:
  // W [rows, cols] row-major (y = x W^T). Null where oneDNN's matmul has no blocked layout
  // for it here: callers keep the plain GEMM.
  static std::shared_ptr<const PackedMatrix> pack(const float* w, int64_t rows, int64_t cols);
  ~PackedMatrix();

  // y [m, rows] = x [m, cols] W^T + bias (null: none). False, with nothing written, where the
  // matmul for m rows wants another weight layout than the packed one (the caller then runs
  // the plain GEMM). Thread-safe.
  bool linear(const float* x, int64_t m, const float* bias, float* y) const;

  size_t bytes() const;

 private:
  struct Impl;
  explicit PackedMatrix(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nmt::cpu
