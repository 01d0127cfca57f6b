#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace nmt::kernels {

size_t attention_workspace_bytes(int64_t batch, int heads, int64_t q_len, int64_t kv_len,
                                 size_t elem_size) {
  return size_t(batch) * size_t(heads) * size_t(q_len) * size_t(kv_len) * elem_size;
}

namespace {
int64_t kv_batch(const AttentionArgs<float>& a, int64_t b) {
  return a.kv_index ? a.kv_index[b] : b / a.queries_per_kv;
}

// Where kv batch kv's rows start (elements).
int64_t kv_start(const AttentionArgs<float>& a, int64_t kv) {
  return a.kv_starts ? int64_t(a.kv_starts[kv]) * a.kv_row_stride : kv * a.kv_batch_stride;
}

// Number of keys query i of batch b sees.
int64_t visible_keys(const AttentionArgs<float>& a, int64_t b, int64_t i) {
  int64_t n = a.kv_len;
  if (a.key_lengths) n = std::min<int64_t>(n, a.key_lengths[kv_batch(a, b)]);
  if (a.causal) n = std::min<int64_t>(n, i + a.causal_offset + 1);
  return std::max<int64_t>(n, 0);
}

// softmax(q . K_j) V over the n keys that key(j) / value(j) point to; q already scaled.
template <class KeyFn, class ValueFn>
void attend(const float* q, int64_t n, int head_dim, KeyFn key, ValueFn value,
            const float* v_bias, float* o) {
  std::vector<double> s(static_cast<size_t>(n));
  double max_s = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* k = key(j);
    double dot = 0.0;
    for (int d = 0; d < head_dim; ++d) dot += double(q[d]) * double(k[d]);
    s[size_t(j)] = dot;
    max_s = std::max(max_s, dot);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(s[size_t(j)] - max_s);
  for (int d = 0; d < head_dim; ++d) {
    double acc = 0.0;
    for (int64_t j = 0; j < n; ++j) acc += std::exp(s[size_t(j)] - max_s) * double(value(j)[d]);
    o[d] = n > 0 ? float(acc / sum) + (v_bias ? v_bias[d] : 0.f) : 0.f;
  }
}
}  // namespace

void attention_scores_cpu(const AttentionArgs<float>& a, float* scores) {
  if (a.q_bias || a.v_bias || a.kv_index || a.kv_starts)
    throw std::invalid_argument("attention scores take no biases, no kv_index and no kv_starts");
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
  std::vector<float> q(size_t(a.head_dim));
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t kv = kv_batch(a, b);
    for (int h = 0; h < a.heads; ++h) {
      const int64_t hd = int64_t(h) * a.head_dim;
      const float* kh = a.k + kv_start(a, kv) + hd;
      const float* vh = a.v + kv_start(a, kv) + hd;
      for (int64_t i = 0; i < a.q_len; ++i) {
        const float* qi = a.q + b * a.q_batch_stride + i * a.q_row_stride + hd;
        for (int d = 0; d < a.head_dim; ++d)
          q[size_t(d)] = (qi[d] + (a.q_bias ? a.q_bias[hd + d] : 0.f)) * a.scale;
        attend(q.data(), visible_keys(a, b, i), a.head_dim,
               [&](int64_t j) { return kh + j * a.kv_row_stride; },
               [&](int64_t j) { return vh + j * a.kv_row_stride; },
               a.v_bias ? a.v_bias + hd : nullptr,
               a.out + b * a.out_batch_stride + i * a.out_row_stride + hd);
      }
    }
  }
}

void decoder_self_attention_cpu(const DecoderSelfAttentionArgs<float>& a) {
  const int64_t d = int64_t(a.heads) * a.head_dim;
  const int64_t token_stride = a.token_stride ? a.token_stride : d;
  auto position = [&](int64_t r) -> int64_t { return a.positions ? a.positions[r] : *a.step; };
  auto cache_row = [&](int64_t r) -> int64_t { return a.cache_rows ? a.cache_rows[r] : r; };
  for (int64_t r = 0; r < a.rows; ++r) {  // appends first: rows read others' earlier positions
    const float* src = a.qkv + r * 3 * d;
    const int64_t at = int64_t(a.key_rows[cache_row(r) * a.capacity + position(r)]) * token_stride;
    for (int64_t c = 0; c < d; ++c) {
      a.k_cache[at + c] = src[d + c] + a.bias[d + c];
      a.v_cache[at + c] = src[2 * d + c] + a.bias[2 * d + c];
    }
  }
  std::vector<float> q(size_t(a.head_dim));
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t t = position(r), own = cache_row(r);
    const int* key_rows = a.key_rows + own * a.capacity;
    auto at = [&](const float* cache, int64_t h, int64_t j) {
      return cache + int64_t(key_rows[j]) * token_stride + h * a.head_dim;
    };
    for (int h = 0; h < a.heads; ++h) {
      const int64_t hd = int64_t(h) * a.head_dim;
      for (int c = 0; c < a.head_dim; ++c)
        q[size_t(c)] = (a.qkv[r * 3 * d + hd + c] + a.bias[hd + c]) * a.scale;
      attend(q.data(), t + 1, a.head_dim, [&](int64_t j) { return at(a.k_cache, h, j); },
             [&](int64_t j) { return at(a.v_cache, h, j); }, nullptr, a.out + r * d + hd);
    }
  }
}

}  // namespace nmt::kernels
