#include "model/cpu/candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/cpu/vector_math.h"

namespace nmt::cpu {
namespace {

float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < n; ++c) m = std::max(m, x[c]);
  return m;
}

// (score, index) before (score, index): higher score, then lower index.
inline bool better(float sa, int ia, float sb, int ib) { return sa > sb || (sa == sb && ia < ib); }

// Inserts (s, t) into the sorted list of `count` entries; a full list (count == k) drops its
// last entry, which (s, t) must beat.
inline void insert(float* scores, int* tokens, int* count, int k, float s, int t) {
  int i = *count < k ? (*count)++ : k - 1;
  while (i > 0 && better(s, t, scores[i - 1], tokens[i - 1])) {
    scores[i] = scores[i - 1];
    tokens[i] = tokens[i - 1];
    --i;
  }
  scores[i] = s;
  tokens[i] = t;
}

}  // namespace

float log_sum_exp(const float* x, int64_t n) {
  const float max_v = row_max(x, n);
  return float(std::log(sum_exp(x, n, max_v))) + max_v;
}

void row_topk(float* x, int64_t n, float running, const RowMasks& masks, int k, float* scores, int* tokens) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (masks.force_eos) {
    std::fill(x, x + n, neg_inf);
    x[masks.eos_id] = 0.f + running;
  } else {
    const float lse = log_sum_exp(x, n);
#pragma omp simd
    for (int64_t t = 0; t < n; ++t) x[t] = (x[t] - lse) + running;
    if (masks.pad_id >= 0) x[masks.pad_id] = neg_inf;
    if (masks.mask_eos) x[masks.eos_id] = neg_inf;
  }
  int count = 0;
  // Blocks whose best score cannot enter a full list are skipped after one vectorized max.
  constexpr int64_t kBlock = 64;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    if (count == k) {
      const float m = row_max(x + b, e - b);
      if (!(m > scores[k - 1])) continue;  // a tie loses to the listed (lower) index
    }
    for (int64_t t = b; t < e; ++t) {
      if (count == k && !(x[t] > scores[k - 1])) continue;  // likewise
      insert(scores, tokens, &count, k, x[t], int(t));
    }
  }
}

void merge_topk(const float* scores, const int* tokens, int rows, int per_row, int64_t stride, int vocab,
                int k, float* out_scores, int* out_index) {
  int count = 0;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < per_row; ++i) {
      const float s = scores[r * stride + i];
      const int idx = r * vocab + tokens[r * stride + i];
      if (count == k && !better(s, idx, out_scores[k - 1], out_index[k - 1])) break;  // the row's rest is worse
      insert(out_scores, out_index, &count, k, s, idx);
    }
  }
}

}  // namespace nmt::cpu
