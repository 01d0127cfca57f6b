#include "model/cpu/dense.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vector_math.h"
#include "kernels/softmax.h"
#include "model/cpu/gemm.h"
#include "model/error.h"

namespace nmt::cpu {

Linear Linear::from(const Weights& weights, const std::string& prefix) {
  const HostTensor& w = weights.get(prefix + ".weight");
  const HostTensor& b = weights.get(prefix + ".bias");
  return Linear{w.data.data(), b.data.data(), w.shape[1], w.shape[0]};
}

Linear Linear::concat(const std::vector<Linear>& parts) {
  Linear l;
  l.in = parts.at(0).in;
  for (const Linear& p : parts) {
    if (p.in != l.in) throw Error(ErrorCode::kInternal, "Linear::concat: parts of different input sizes");
    l.out += p.out;
  }
  auto storage = std::make_shared<std::vector<float>>(size_t(l.out * (l.in + 1)));
  float* w = storage->data();
  float* b = w + l.out * l.in;
  for (const Linear& p : parts) {
    w = std::copy_n(p.w, p.out * p.in, w);
    b = std::copy_n(p.b, p.out, b);
  }
  l.w = storage->data();
  l.b = storage->data() + l.out * l.in;
  l.storage = std::move(storage);
  return l;
}

void Linear::operator()(const float* x, int64_t rows, float* y) const {
  if (int8) return int8_linear(x, rows, *int8, b, y);
  if (packed && packed->linear(x, rows, b, y)) return;
  if (!b) return sgemm(true, rows, out, in, 1.f, x, in, w, in, 0.f, y, out);
  for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, y + r * out);
  sgemm(true, rows, out, in, 1.f, x, in, w, in, 1.f, y, out);
}

void attention(const float* q, const float* k, const float* v, float* out, const AttentionShape& s,
               std::vector<float>* scratch) {
  scratch->resize(size_t(s.queries * s.keys));
  float* scores = scratch->data();
  const float scale = 1.f / std::sqrt(float(s.head_dim));
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t off = h * s.head_dim;
    // scores [queries, keys] = q_h k_h^T
    sgemm(true, s.queries, s.keys, s.head_dim, 1.f, q + off, s.q_stride, k + off, s.kv_stride, 0.f,
          scores, s.keys);
    for (int64_t i = 0; i < s.queries; ++i) {
      int valid = int(s.causal ? std::min(s.valid_keys, i + 1) : s.valid_keys);
      kernels::SoftmaxOptions opt;
      opt.scale = scale;
      opt.key_lengths = &valid;
      opt.rows_per_length = 1;
      kernels::softmax_cpu(scores + i * s.keys, scores + i * s.keys, 1, s.keys, opt);
    }
    // out_h [queries, head_dim] = P v_h
    sgemm(false, s.queries, s.head_dim, s.keys, 1.f, scores, s.keys, v + off, s.kv_stride, 0.f,
          out + off, s.out_stride);
  }
}

// One head's softmax numerators over the keys into e[0, keys), returning their sum:
// kernels::softmax_cpu's arithmetic (max of the scaled scores in float, exp and sum in
// double), each exp computed once and kept. `at`: the head's offset in a key row.
[[gnu::always_inline]] static inline double head_exps(const float* qh, const float* const* rows, int64_t at, int64_t keys, int64_t head_dim,
                        float scale, double* e) {
  float max_s = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    const float* kj = rows[j] + at;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < head_dim; ++c) dot += qh[c] * kj[c];
    const float s = dot * scale;
    e[j] = s;
    max_s = std::max(max_s, s);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < keys; ++j) {
    e[j] = std::exp(double(float(e[j]) - max_s));
    sum += e[j];
  }
  return sum;
}

NMT_CPU_CLONES void attend_row(const float* q, const float* const* rows, int64_t offset, int64_t value_offset,
                               float* out, int64_t keys, int64_t heads, int64_t head_dim,
                               std::vector<double>* scratch) {
  scratch->resize(std::max(scratch->size(), size_t(keys)));
  double* e = scratch->data();
  const float scale = 1.f / std::sqrt(float(head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * head_dim;
    const double sum = head_exps(qh, rows, offset + h * head_dim, keys, head_dim, scale, e);
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.f);
    for (int64_t j = 0; j < keys; ++j) {
      const float p = float(e[j] / sum);
      const float* vj = rows[j] + offset + value_offset + h * head_dim;
#pragma omp simd
      for (int64_t c = 0; c < head_dim; ++c) oh[c] += p * vj[c];
    }
  }
}

int attention_argmax(const float* q, const float* const* rows, int64_t offset, int64_t keys, int64_t heads,
                     int64_t head_dim, std::vector<double>* scratch) {
  scratch->resize(std::max(scratch->size(), size_t(2 * keys)));
  double* e = scratch->data();
  double* mean = e + keys;  // sum over heads (the argmax of the mean)
  std::fill(mean, mean + keys, 0.0);
  const float scale = 1.f / std::sqrt(float(head_dim));
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * head_dim;
    const double sum = head_exps(qh, rows, offset + h * head_dim, keys, head_dim, scale, e);
    for (int64_t j = 0; j < keys; ++j) mean[j] += double(float(e[j] / sum));
  }
  int64_t best = 0;
  for (int64_t j = 1; j < keys; ++j) {
    if (mean[j] > mean[best]) best = j;
  }
  return int(best);
}

}  // namespace nmt::cpu
