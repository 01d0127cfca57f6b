#pragma once
// The CPU engine's beam-search candidates after the output projection, without writing the
// log-softmax of the whole vocabulary and sorting beam x vocab scores: per row, one pass for
// the max, one vectorized pass of exp (in double, as kernels::softmax_cpu sums it) for the
// log-sum-exp, one pass that keeps the row's k best scores (over the blocks whose max can
// enter them; the max pass keeps each block's); then the k best of a sentence's
// rows. Same semantics as kernels::beam_topk_cpu (the reference it is tested against):
//   score[t] = (x[t] - lse) + running, pad -> -inf, eos -> -inf when mask_eos, every token
//   but eos -> -inf and eos -> running when force_eos; likewise for forced_token (the forced
//   first target token) when >= 0 and not force_eos; best first, equal scores by the lower
//   index (torch.topk's order).
#include <cstdint>

namespace nmt::cpu {

// max(x) + log(sum exp(x - max)): the max and the differences in float, exp and the sum in
// double (kernels::softmax_cpu's log-sum-exp), through kernels/cpu/vector_math.h.
float log_sum_exp(const float* x, int64_t n);

struct RowMasks {
  int pad_id = -1;  // < 0: none
  int eos_id = -1;
  bool mask_eos = false;
  bool force_eos = false;
  int forced_token = -1;  // >= 0: the only token not -inf, with log-prob 0 (below force_eos)
  bool log_probs = false;  // x holds log-probs already: its log-sum-exp is taken as 0
};

// The k (<= n) best candidate scores of one row, best first: scores[i] and tokens[i], from
// the row's logits `x` (read only).
void row_topk(const float* x, int64_t n, float running, const RowMasks& masks, int k, float* scores, int* tokens);

// Repetition controls (StepInput's token edits): row_topk of a row with `count` edits, on the
// logits (on_logits: greedy search) or on the log-probs (beam search: each edited after the
// log-softmax of the unedited row, row_topk's own); the unedited tokens score exactly as
// row_topk scores them.
struct RowEdits {
  const int* tokens = nullptr;
  const float* factors = nullptr;  // 0: banned; else the repetition penalty (edited_score())
  int count = 0;
  bool on_logits = false;
};
void row_topk_edited(const float* x, int64_t n, float running, const RowMasks& masks, const RowEdits& edits, int k,
                     float* scores, int* tokens);

// The k best of `rows` rows' row_topk lists (`per_row` entries each, at scores/tokens +
// r * stride), best first; out_index = row * vocab + token (beam_topk_cpu's index).
void merge_topk(const float* scores, const int* tokens, int rows, int per_row, int64_t stride, int vocab,
                int k, float* out_scores, int* out_index);

}  // namespace nmt::cpu
