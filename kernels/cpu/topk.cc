#include "kernels/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace nmt::kernels {
namespace {
// Sentence s's kTopkMaskEos / kTopkForceEos bits.
unsigned sentence_flags(const TopkMasks& m, int64_t s) {
  if (m.sentence_flags) return m.sentence_flags[s];
  return (m.mask_eos ? kTopkMaskEos : 0u) | (m.force_eos ? kTopkForceEos : 0u);
}
}  // namespace

void beam_topk_cpu(const float* logits, const float* bias, const float* running_scores,
                   int64_t sentences, int beam, int vocab, int k, const TopkMasks& masks,
                   float* out_scores, int* out_index) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> cand(size_t(beam) * vocab);
  std::vector<int> order(cand.size());
  for (int64_t s = 0; s < sentences; ++s) {
    const unsigned flags = sentence_flags(masks, s);
    const bool mask_eos = flags & kTopkMaskEos, force_eos = flags & kTopkForceEos;
    for (int b = 0; b < beam; ++b) {
      const int64_t row = s * beam + b;
      const float* x = logits + row * vocab;
      float* c = cand.data() + size_t(b) * vocab;
      float max_v = neg_inf;
      for (int t = 0; t < vocab; ++t) {
        c[t] = x[t] + (bias ? bias[t] : 0.f);
        max_v = std::max(max_v, c[t]);
      }
      double sum = 0.0;
      for (int t = 0; t < vocab; ++t) sum += std::exp(double(c[t] - max_v));
      const float lse = max_v + float(std::log(sum));
      for (int t = 0; t < vocab; ++t) {
        float logp = c[t] - lse;
        if (t == masks.pad_id) logp = neg_inf;
        if (mask_eos && t == masks.eos_id) logp = neg_inf;
        if (force_eos) logp = t != masks.eos_id ? neg_inf : 0.f;
        c[t] = logp + running_scores[row];
      }
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return cand[a] > cand[b] || (cand[a] == cand[b] && a < b);
    });
    for (int i = 0; i < k; ++i) {
      out_scores[s * k + i] = cand[order[i]];
      out_index[s * k + i] = order[i];
    }
  }
}

int beam_topk_splits(int64_t rows, int vocab) {
  // Enough blocks to fill a large GPU (~8 per SM on 132 SMs), chunks of at least 1024 tokens;
  // one chunk per row (the register-resident row path) once the rows alone give a block per SM
  // and rows are short. On H100, 256 rows x 8001: 38 us with one chunk per row, 55 us in
  // three launches with 5 chunks (before the one-pass chunks). The one-pass chunk path
  // (ncu, H100, 1024 rows x 58101 in 2 chunks a row): 301 us, against 494 us in three launches.
  if (rows >= 128 && vocab <= 16384) return 1;
  const int64_t want = (1056 + rows - 1) / std::max<int64_t>(rows, 1);
  const int64_t most = std::max<int64_t>(1, vocab / 1024);
  return int(std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 64)));
}

int beam_topk_padded_k(int k) {
  int p = 1;
  while (p < k) p *= 2;
  return p;
}

int beam_topk_chunk_candidates(int k) { return std::min(2 * beam_topk_padded_k(k), 32); }

size_t beam_topk_workspace_bytes(int64_t sentences, int beam, int vocab, int k) {
  const int64_t rows = sentences * beam;
  const int64_t chunks = rows * beam_topk_splits(rows, vocab);
  // per chunk: (max, sum) of its logits, then its best (key, token) pairs (the row path keeps
  // the padded k of them, the chunked path beam_topk_chunk_candidates)
  return size_t(chunks) * (2 * sizeof(float) +
                           size_t(beam_topk_chunk_candidates(k)) * (sizeof(float) + sizeof(int)));
}

}  // namespace nmt::kernels
