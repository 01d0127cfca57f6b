#pragma once
// The repetition controls' token edits of one beam's next step (DecodeOptions'
// no_repeat_ngram_size, repetition_penalty and suppress_sequences), from the beam's tokens so
// far, the decoder start token first: the ids transformers' logits processors read
// (docs/decoding.md, "Repetition controls"):
//   - NoRepeatNGramLogitsProcessor: with n = no_repeat_ngram_size and L tokens, once L + 1 >= n,
//     every token that followed an earlier occurrence of the last n - 1 tokens is banned;
//   - NoBadWordsLogitsProcessor (suppress_sequences): a sequence's last token is banned where
//     the beam ends with the rest of it (a one-token sequence: always);
//   - RepetitionPenaltyLogitsProcessor: every distinct token of the beam, once, with factor p.
// A banned token takes no penalty (-inf either way). Pure host code: tested on its own.
#include <vector>

#include "model/decoding/decode_options.h"

namespace nmt {

class TokenEdits {
 public:
  // Appends the edits (StepInput::edit_tokens / edit_factors: factor 0 bans) for a beam whose
  // tokens are `history` (non-empty: the decoder start token first). Not thread-safe: it
  // keeps a mark per token id between calls so that each call is linear in the history.
  void append(const std::vector<int>& history, const DecodeOptions& options, std::vector<int>* tokens,
              std::vector<float>* factors);

 private:
  bool mark(int token);  // true when not yet marked in this call
  std::vector<unsigned> marks_;  // per token id: the call that marked it
  unsigned call_ = 0;
};

}  // namespace nmt
