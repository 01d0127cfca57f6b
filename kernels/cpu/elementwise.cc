#include "kernels/elementwise.h"

namespace nmt::kernels {

void embed_positions_cpu(const int* ids, const float* embeddings, const float* positions_table,
                         const int* positions, float* out, int64_t rows, int d_model,
                         float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = embeddings + int64_t(ids[r]) * d_model;
    const float* p = positions_table ? positions_table + int64_t(positions[r]) * d_model : nullptr;
    float* o = out + r * d_model;
    for (int c = 0; c < d_model; ++c) o[c] = e[c] * scale + (p ? p[c] : 0.f);
  }
}

void add_bias_cpu(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[c];
}

void gather_rows_cpu(const float* src, float* dst, const int* index, int64_t rows,
                     int64_t src_row_stride, int64_t dst_row_stride, int64_t row_elems) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + int64_t(index[r]) * src_row_stride;
    float* d = dst + r * dst_row_stride;
    for (int64_t c = 0; c < row_elems; ++c) d[c] = s[c];
  }
}

void kv_append_cpu(const float* k_new, const float* v_new, int64_t new_row_stride,
                   float* k_cache, float* v_cache, int64_t rows, int64_t step, int64_t max_len,
                   int64_t d_model) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t dst = (r * max_len + step) * d_model;
    for (int64_t c = 0; c < d_model; ++c) {
      k_cache[dst + c] = k_new[r * new_row_stride + c];
      v_cache[dst + c] = v_new[r * new_row_stride + c];
    }
  }
}

}  // namespace nmt::kernels
