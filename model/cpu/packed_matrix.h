#pragma once
// A weight matrix (float32, or int8 quantized) reordered once, at load, into the blocked
// layout oneDNN's matmul reads fastest on this CPU. dnnl_sgemm and dnnl_gemm_s8s8s32 repack
// their weight operand at every call: with the decode step's few rows (a batch's beams) that
// repacking is a sizeable part of each GEMM (profile of issue 16: 10-25% of a float32 GEMM's
// time at 37-128 rows, most at the fewest), and the int8 GEMM allocates its packing buffers
// at every call, which the server's fixed mmap threshold (server/app/main.cc) turns into an mmap
// and a munmap each time.
#include <cstdint>
#include <memory>

namespace nmt::cpu {

class PackedMatrix {
 public:
  // W [rows, cols] row-major (y = x W^T). Null where oneDNN's matmul has no blocked layout
  // for it here: callers keep the plain GEMM.
  static std::shared_ptr<const PackedMatrix> pack(const float* w, int64_t rows, int64_t cols);
  static std::shared_ptr<const PackedMatrix> pack(const int8_t* w, int64_t rows, int64_t cols);
  ~PackedMatrix();

  // Float32 weights: y [m, rows] = x [m, cols] W^T + bias (null: none).
  // Int8 weights: y [m, rows] = x [m, cols] W^T in exact int32 arithmetic.
  // False, with nothing written, where the matmul for m rows wants another weight layout than
  // the packed one (the caller then runs the plain GEMM). Thread-safe. Each is for its own
  // weight type (the other returns false).
  bool linear(const float* x, int64_t m, const float* bias, float* y) const;
  bool product(const int8_t* x, int64_t m, int32_t* y) const;

  size_t bytes() const;

 private:
  struct Impl;
  explicit PackedMatrix(std::unique_ptr<Impl> impl);
  bool run(const void* x, int64_t m, const void* bias, void* y) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nmt::cpu
