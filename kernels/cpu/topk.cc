#include "kernels/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace nmt::kernels {
namespace {
// Sentence s's kTopkMaskEos / kTopkForceEos / kTopkForceToken bits.
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
    const bool mask_eos = flags & kTopkMaskEos;
    const int forced = (flags & kTopkForceEos) ? masks.eos_id : (flags & kTopkForceToken) ? masks.forced_tokens[s] : -1;
    const bool teacher = (flags & kTopkTeacherForced) && !(flags & kTopkForceEos);
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
        if (forced >= 0) logp = t != forced ? neg_inf : teacher ? c[t] - lse : 0.f;
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

namespace {
// The kOnePass path's shapes: many rows of a wide vocabulary.
bool one_pass_shape(int64_t rows, int vocab) { return rows >= 512 && vocab > kBeamTopkRowTokens; }
}  // namespace

int beam_topk_splits(int64_t rows, int vocab) {
  // kOnePass: chunks a block holds in registers.
  if (one_pass_shape(rows, vocab)) return (vocab + kBeamTopkChunkTokens - 1) / kBeamTopkChunkTokens;
  // Enough blocks to fill a large GPU (~8 per SM on 132 SMs), chunks of at least 1024 tokens;
  // one chunk per row (the register-resident row path) once the rows alone give a block per SM
  // and rows are short. On H100, 256 rows x 8001: 38 us with one chunk per row, 55 us in
  // three launches with 5 chunks. Up to 8 rows (a decode step of one or two sentences) about a
  // block an SM: the three launches are latency, and fewer chunks leave the sentence's merge
  // fewer candidates (H200, Transformer-base batch 1, 32 chunks a row instead of 56: the step
  // 1.3-2.3% shorter, batch 2 the same; end-to-end run 35, call 6).
  if (rows >= 128 && vocab <= kBeamTopkRowTokens) return 1;
  const int64_t blocks = rows <= 8 ? 128 : 1056;
  const int64_t want = (blocks + rows - 1) / std::max<int64_t>(rows, 1);
  // And chunks a block holds in registers (topk_held_kernel) where the vocabulary allows:
  // fewer, wider ones went to per-thread lists (topk_score_kernel), and Transformer-base at 256
  // rows took 5 chunks of 11621 tokens there, 82.4 us a launch, against 37.5 us for 15 held
  // chunks; its decode step at batches 32 / 64 / 96 7-10% shorter (end-to-end run 47).
  const int64_t held = (vocab + kBeamTopkHeldChunkTokens - 1) / kBeamTopkHeldChunkTokens;
  const int64_t most = std::max<int64_t>(1, vocab / 1024);
  return int(std::clamp<int64_t>(std::max(want, held), 1, std::min<int64_t>(most, 64)));
}

int beam_topk_padded_k(int k) {
  int p = 1;
  while (p < k) p *= 2;
  return p;
}

BeamTopkPath beam_topk_path(int64_t rows, int vocab, int k) {
  if (beam_topk_splits(rows, vocab) == 1 && vocab <= kBeamTopkRowTokens &&
      beam_topk_padded_k(k) <= kBeamTopkRowMaxK)
    return BeamTopkPath::kRow;
  // One read of the logits instead of two pays where the logits are large. Run 8 of
  // bench/history/engine-cuda.md run 8 (H100, Transformer-base: vocabulary 58101, beam 4, k 8; ms per decode
  // step, two-pass (two runs) -> one-pass): 4 rows 0.359 / 0.374 -> 0.380 (slower: the one
  // block per sentence merge, 32 us there, costs more than the extra launch), 256 rows 0.590 /
  // 0.623 -> 0.589 (even), 512 rows 0.826 / 0.811 -> 0.752, 1024 rows 1.322 / 1.320 -> 1.146,
  // 2048 rows 2.310 / 2.308 -> 1.935, 4096 rows 4.237 / 4.242 -> 3.507. Below 512 rows, and for
  // rows <= 16384 tokens at < 128 rows (the demo model's 8001 at 4 rows: single-client decode
  // p50 2.56 ms one-pass against 2.21 ms two-pass, server run 7), the two-pass path stays.
  // Only vocabulary 58101 with k = 8 was measured wide; other k take the same rule.
  if (one_pass_shape(rows, vocab)) return BeamTopkPath::kOnePass;
  return BeamTopkPath::kTwoPass;
}

int beam_topk_chunk_candidates(int k) { return std::min(2 * beam_topk_padded_k(k), 32); }

size_t beam_topk_workspace_bytes(int64_t sentences, int beam, int vocab, int k) {
  const int64_t rows = sentences * beam;
  const int64_t chunks = rows * beam_topk_splits(rows, vocab);
  // per chunk: (max, sum) of its logits, then its best (score or key, token) pairs
  const int per_chunk = beam_topk_path(rows, vocab, k) == BeamTopkPath::kOnePass
                            ? beam_topk_chunk_candidates(k)
                            : beam_topk_padded_k(k);
  return size_t(chunks) * (2 * sizeof(float) + size_t(per_chunk) * (sizeof(float) + sizeof(int)));
}

}  // namespace nmt::kernels
