#include "model/decoding/controls/token_edits.h"

#include <algorithm>
#include <cmath>

#include "model/decoding/engine.h"
#include "model/error.h"

namespace nmt {

bool TokenEdits::mark(int token) {
  if (size_t(token) >= marks_.size()) marks_.resize(size_t(token) + 1, 0u);
  if (marks_[size_t(token)] == call_) return false;
  marks_[size_t(token)] = call_;
  return true;
}

void TokenEdits::append(const std::vector<int>& history, const DecodeOptions& options, std::vector<int>* tokens,
                        std::vector<float>* factors) {
  if (++call_ == 0) {  // wrapped: forget every mark
    std::fill(marks_.begin(), marks_.end(), 0u);
    call_ = 1;
  }
  auto ban = [&](int t) {
    if (!mark(t)) return;
    tokens->push_back(t);
    factors->push_back(0.f);
  };
  const size_t len = history.size();
  const int n = options.no_repeat_ngram_size;
  // transformers' _calc_banned_ngram_tokens: nothing before cur_len + 1 >= n; the n-grams
  // are every window of the history, the key its last n - 1 tokens.
  if (n > 0 && len + 1 >= size_t(n)) {
    const size_t key = len - size_t(n - 1);  // the key's first token
    for (size_t i = 0; i + size_t(n) <= len; ++i) {
      if (std::equal(history.begin() + long(i), history.begin() + long(i) + (n - 1), history.begin() + long(key)))
        ban(history[i + size_t(n - 1)]);
    }
  }
  for (const std::vector<int>& seq : options.suppress_sequences) {
    const size_t prefix = seq.size() - 1;
    if (prefix > len) continue;
    if (std::equal(seq.begin(), seq.begin() + long(prefix), history.end() - long(prefix))) ban(seq.back());
  }
  if (options.repetition_penalty != 1.f) {
    for (int t : history) {
      if (!mark(t)) continue;
      tokens->push_back(t);
      factors->push_back(options.repetition_penalty);
    }
  }
}

void check_token_edits(const StepInput& in, size_t rows, int vocab) {
  if (in.edit_begin.empty()) {
    if (!in.edit_tokens.empty() || !in.edit_factors.empty())
      throw Error(ErrorCode::kInternal, "engine step: token edits without their rows' offsets");
    return;
  }
  auto bad = [](const char* what) { throw Error(ErrorCode::kInternal, std::string("engine step: token edits: ") + what); };
  if (in.edit_begin.size() != rows + 1) bad("offsets do not match the rows");
  if (in.edit_tokens.size() != in.edit_factors.size() || in.edit_begin.front() != 0 ||
      size_t(in.edit_begin.back()) != in.edit_tokens.size())
    bad("offsets do not match the edits");
  size_t row = 0;
  for (const StepGroup& g : in.groups) {
    for (int b = 0; b < g.beam; ++b, ++row) {
      if (in.edit_begin[row + 1] < in.edit_begin[row]) bad("offsets decrease");
      if (g.follows >= 0 && in.edit_begin[row + 1] > in.edit_begin[row]) bad("a following group has edits");
    }
  }
  for (size_t e = 0; e < in.edit_tokens.size(); ++e) {
    if (in.edit_tokens[e] < 0 || in.edit_tokens[e] >= vocab) bad("a token is outside the vocabulary");
    if (!std::isfinite(in.edit_factors[e]) || in.edit_factors[e] < 0.f) bad("a factor is negative or not finite");
  }
}

}  // namespace nmt
