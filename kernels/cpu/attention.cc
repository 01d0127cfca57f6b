#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace nmt::kernels {

size_t attention_workspace_bytes(int64_t batch, int heads, int64_t q_len, int64_t kv_len,
                                 size_t elem_size) {
  return size_t(batch) * size_t(heads) * size_t(q_len) * size_t(kv_len) * elem_size;
}

namespace {
// Number of keys query i of batch b sees.
int64_t visible_keys(const AttentionArgs<float>& a, int64_t b, int64_t i) {
  int64_t n = a.kv_len;
  if (a.key_lengths) n = std::min<int64_t>(n, a.key_lengths[b / a.queries_per_kv]);
  if (a.causal) n = std::min<int64_t>(n, i + a.causal_offset + 1);
  return std::max<int64_t>(n, 0);
}
}  // namespace

void attention_scores_cpu(const AttentionArgs<float>& a, float* scores) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t kv = b / a.queries_per_kv;
    for (int h = 0; h < a.heads; ++h) {
      for (int64_t i = 0; i < a.q_len; ++i) {
        const float* q = a.q + b * a.q_batch_stride + i * a.q_row_stride + h * a.head_dim;
        float* s = scores + ((b * a.heads + h) * a.q_len + i) * a.kv_len;
        const int64_t visible = visible_keys(a, b, i);
        for (int64_t j = 0; j < a.kv_len; ++j) {
          if (j >= visible) {
            s[j] = neg_inf;
            continue;
          }
          const float* k = a.k + kv * a.kv_batch_stride + j * a.kv_row_stride + h * a.head_dim;
          double dot = 0.0;
          for (int d = 0; d < a.head_dim; ++d) dot += double(q[d]) * double(k[d]);
          s[j] = float(dot) * a.scale;
        }
      }
    }
  }
}

void attention_cpu(const AttentionArgs<float>& a) {
  std::vector<float> s(a.kv_len);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t kv = b / a.queries_per_kv;
    for (int h = 0; h < a.heads; ++h) {
      for (int64_t i = 0; i < a.q_len; ++i) {
        const float* q = a.q + b * a.q_batch_stride + i * a.q_row_stride + h * a.head_dim;
        float* o = a.out + b * a.out_batch_stride + i * a.out_row_stride + h * a.head_dim;
        const int64_t visible = visible_keys(a, b, i);
        double max_s = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < visible; ++j) {
          const float* k = a.k + kv * a.kv_batch_stride + j * a.kv_row_stride + h * a.head_dim;
          double dot = 0.0;
          for (int d = 0; d < a.head_dim; ++d) dot += double(q[d]) * double(k[d]);
          s[j] = float(dot * a.scale);
          max_s = std::max(max_s, double(s[j]));
        }
        double sum = 0.0;
        for (int64_t j = 0; j < visible; ++j) sum += std::exp(double(s[j]) - max_s);
        for (int d = 0; d < a.head_dim; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < visible; ++j) {
            const float* v = a.v + kv * a.kv_batch_stride + j * a.kv_row_stride + h * a.head_dim;
            acc += std::exp(double(s[j]) - max_s) * double(v[d]);
          }
          o[d] = visible > 0 ? float(acc / sum) : 0.f;
        }
      }
    }
  }
}

}  // namespace nmt::kernels
