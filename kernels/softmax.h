#pragma once
// Row-wise softmax / log-softmax with the attention scale and key-padding mask fused into the
// load: row r reads x[r, c] * scale for c < valid_cols(r) and treats the rest as -inf.
#include <cstdint>

#include "kernels/stream.h"

namespace nmt::kernels {

struct SoftmaxOptions {
  float scale = 1.0f;
  bool log = false;              // log-softmax (beam search) instead of softmax
  const int* key_lengths = nullptr;  // valid columns per group of rows; null = all valid
  int64_t rows_per_length = 1;   // row r uses key_lengths[r / rows_per_length]
  // Causal mask: when causal_rows > 0, row r is query i = r % causal_rows and also hides the
  // columns c > i + causal_offset.
  int64_t causal_rows = 0;
  int64_t causal_offset = 0;
};

// Number of visible columns of row r under opt (shared by the CPU and CUDA paths).
NMT_HOST_DEVICE inline int64_t softmax_valid_cols(int64_t r, int64_t cols, const int* key_lengths,
                                  const SoftmaxOptions& opt) {
  int64_t valid = cols;
  if (key_lengths) {
    const int64_t len = key_lengths[r / opt.rows_per_length];
    valid = len < valid ? len : valid;
  }
  if (opt.causal_rows > 0) {
    const int64_t len = r % opt.causal_rows + opt.causal_offset + 1;
    valid = len < valid ? len : valid;
  }
  return valid < 0 ? 0 : valid;
}

void softmax_cpu(const float* x, float* y, int64_t rows, int64_t cols, const SoftmaxOptions& opt);

#if NMT_WITH_CUDA
// T = float, __half or __nv_bfloat16; key_lengths, when set, is a device pointer.
template <typename T>
void softmax_cuda(const T* x, T* y, int64_t rows, int64_t cols, const SoftmaxOptions& opt,
                  cudaStream_t stream);
#endif

}  // namespace nmt::kernels
