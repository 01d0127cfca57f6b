#include "model/cpu/dense.h"

#include <cblas.h>

#include <cmath>

#include "kernels/softmax.h"

namespace nmt::cpu {

Linear Linear::from(const Weights& weights, const std::string& prefix) {
  const HostTensor& w = weights.get(prefix + ".weight");
  const HostTensor& b = weights.get(prefix + ".bias");
  return Linear{w.data.data(), b.data.data(), w.shape[1], w.shape[0]};
}

void Linear::operator()(const float* x, int64_t rows, float* y) const {
  for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, y + r * out);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(out), int(in), 1.f, x,
              int(in), w, int(in), 1.f, y, int(out));
}

void attention(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
               std::vector<float>* scratch) {
  scratch->resize(size_t(s.queries * s.keys));
  float* scores = scratch->data();
  const float scale = 1.f / std::sqrt(float(s.head_dim));
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t off = h * s.head_dim;
    // scores [queries, keys] = q_h k_h^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.queries), int(s.keys),
                int(s.head_dim), 1.f, q + off, int(s.q_stride), k + off, int(s.kv_stride), 0.f,
                scores, int(s.keys));
    for (int64_t i = 0; i < s.queries; ++i) {
      int valid = int(s.causal ? std::min(s.valid_keys, i + 1) : s.valid_keys);
      kernels::SoftmaxOptions opt;
      opt.scale = scale;
      opt.key_lengths = &valid;
      opt.rows_per_length = 1;
      kernels::softmax_cpu(scores + i * s.keys, scores + i * s.keys, 1, s.keys, opt);
    }
    // out_h [queries, head_dim] = P v_h
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.queries), int(s.head_dim),
                int(s.keys), 1.f, scores, int(s.keys), v + off, int(s.kv_stride), 0.f, out + off,
                int(s.out_stride));
  }
}

}  // namespace nmt::cpu
