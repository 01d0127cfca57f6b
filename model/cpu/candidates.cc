#include "model/cpu/candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vector_math.h"
#include "model/decoding/engine.h"

namespace nmt::cpu {
namespace {

// Maxima of x's blocks of kBlock (the last one shorter) into block_max, and their max.
constexpr int64_t kBlock = 64;
NMT_CPU_CLONES float block_maxima(const float* x, int64_t n, float* block_max) {
  float all = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t c = b; c < e; ++c) m = std::max(m, x[c]);
    block_max[b / kBlock] = m;
    all = std::max(all, m);
  }
  return all;
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

// x's block maxima in this thread's buffer (grown only), the row's max in *max_v.
const float* row_block_maxima(const float* x, int64_t n, float* max_v) {
  thread_local std::vector<float> block_max;
  block_max.resize(std::max(block_max.size(), size_t((n + kBlock - 1) / kBlock)));
  *max_v = block_maxima(x, n, block_max.data());
  return block_max.data();
}

float log_sum_exp_given_max(const float* x, int64_t n, float max_v) {
  return float(std::log(sum_exp(x, n, max_v))) + max_v;
}

}  // namespace

float log_sum_exp(const float* x, int64_t n) {
  float max_v;
  row_block_maxima(x, n, &max_v);
  return log_sum_exp_given_max(x, n, max_v);
}

void row_topk(const float* x, int64_t n, float running, const RowMasks& masks, int k, float* scores, int* tokens) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // One pass for the blocks' maxima (the row's max among them), one for the sum of exps:
  // the scores are not written, each is computed where a block can enter the list.
  float max_v;
  const float* block_max = row_block_maxima(x, n, &max_v);
  // Forced EOS (transformers applies ForcedEOS after ForcedBOS) or a forced first token: that
  // token's log-prob is 0 and every other token's -inf.
  const bool one_hot = masks.force_eos || masks.forced_token >= 0;
  const int64_t only = masks.force_eos ? masks.eos_id : masks.forced_token;
  // Teacher forcing (Score): the forced token's real log-prob, so the log-sum-exp is needed.
  const bool teacher = masks.teacher_forced && !masks.force_eos && masks.forced_token >= 0;
  const float lse = (one_hot && !teacher) || masks.log_probs ? 0.f : log_sum_exp_given_max(x, n, max_v);
  auto score = [&](int64_t t) {
    if (one_hot) return t == only ? (teacher ? x[t] - lse : 0.f) + running : neg_inf;
    if (t == masks.pad_id || (masks.mask_eos && t == masks.eos_id)) return neg_inf;
    return (x[t] - lse) + running;
  };
  int count = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    // The score is monotone in the logit (float rounding included), so the block's best score
    // is at most that of its max; a block that cannot beat a full list is skipped (a tie
    // loses to the listed, lower, index). Masked tokens only lower a block's best.
    if (count == k && !one_hot && !((block_max[b / kBlock] - lse) + running > scores[k - 1])) continue;
    for (int64_t t = b; t < e; ++t) {
      const float s = score(t);
      if (count == k && !(s > scores[k - 1])) continue;  // likewise
      insert(scores, tokens, &count, k, s, int(t));
    }
  }
}

// The edited row in this thread's buffer: the logits, or their log-probs (x - lse, as
// row_topk subtracts it), with the edits applied; then row_topk over it.
void row_topk_edited(const float* x, int64_t n, float running, const RowMasks& masks, const RowEdits& edits, int k,
                     float* scores, int* tokens) {
  thread_local std::vector<float> row;
  row.resize(size_t(n));
  const float lse = edits.on_logits ? 0.f : log_sum_exp(x, n);
  for (int64_t t = 0; t < n; ++t) row[size_t(t)] = x[t] - lse;
  for (int e = 0; e < edits.count; ++e) {
    float& v = row[size_t(edits.tokens[e])];
    v = edited_score(v, edits.factors[e]);
  }
  RowMasks m = masks;
  m.log_probs = !edits.on_logits;
  row_topk(row.data(), n, running, m, k, scores, tokens);
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
