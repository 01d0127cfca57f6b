#include "kernels/elementwise.h"

namespace nmt::kernels {

void embed_positions_cpu(const int* ids, const float* embeddings, const float* positions_table,
                         const int* positions, float* out, int64_t rows, int d_model,
                         float scale, const int* step) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = embeddings + int64_t(ids[r]) * d_model;
    const int64_t pos = step ? *step : positions[r];
    const float* p = positions_table ? positions_table + pos * d_model : nullptr;
    float* o = out + r * d_model;
    for (int c = 0; c < d_model; ++c) o[c] = e[c] * scale + (p ? p[c] : 0.f);
  }
}

void add_bias_cpu(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[c];
}

void beam_reorder_key_rows_cpu(const int* old_rows, int* new_rows, const int* parent,
                               int64_t rows, int capacity, const int* step,
                               const int* positions, const int* cache_rows, const int* tokens) {
  for (int64_t r = 0; r < rows; ++r) {
    const int t = positions ? positions[r] : *step;
    const int c = cache_rows ? cache_rows[r] : int(r);
    const int* src = old_rows + int64_t(parent[r]) * capacity;
    int* dst = new_rows + int64_t(c) * capacity;
    for (int j = 0; j < t; ++j) dst[j] = src[j];
    dst[t] = tokens ? tokens[r] : c * capacity + t;
  }
}

}  // namespace nmt::kernels
