// SentenceSearch's constrained step (glossary, docs/decoding.md "Glossary"): beam search over
// the rows' logits on the host, where every hypothesis must hold each required phrase
// (PhraseConstraints) before it may end. A grid / dynamic beam allocation in the manner of
// Hokamp & Liu 2017 and Post & Vilar 2018: each row proposes its best tokens and the tokens
// that advance its constraints; the candidates are grouped in banks by the constraint tokens
// they hold, and the beams are filled round-robin over the banks, the most advanced first,
// best score first within a bank, so that hypotheses that hold more of the terms are not
// crowded out by likelier ones that hold fewer.
#include <algorithm>
#include <cmath>

#include "model/decoding/beam_search.h"
#include "model/error.h"

namespace nmt {

using search_detail::kNeg;
using search_detail::length_norm;

bool SentenceSearch::advance_constrained(const float* logits, int vocab, const int* alignments) {
  if (!logits) throw Error(ErrorCode::kInternal, "decode loop: a glossary sentence got no logits from the engine");
  const int beam = options_.beam_size;
  const bool at_max = last_step();
  // A continuing hypothesis' later tokens before the last step (which may have to be EOS):
  // it must still be able to produce every constraint token it lacks within them.
  const int room = options_.max_decoding_length - step_ - 2;
  const float norm = length_norm(step_ + 1, options_.length_penalty);
  const int forced = forced_token();
  continuing_.clear();
  ending_.clear();
  logp_.resize(size_t(vocab));
  for (int b = 0; b < beam; ++b) {
    const Beam& r = running_[size_t(b)];
    if (r.score <= kNeg / 2) continue;  // not live: the first step's other beams, or an empty bank's slot
    const float* row = logits + size_t(b) * size_t(vocab);
    // The engines' log-probs: log_softmax of the row, then the masks (docs/decoding.md, step 2).
    float top = row[0];
    for (int t = 1; t < vocab; ++t) top = std::max(top, row[t]);
    double sum = 0.0;
    for (int t = 0; t < vocab; ++t) sum += std::exp(double(row[t] - top));
    const float lse = top + float(std::log(sum));
    for (int t = 0; t < vocab; ++t) logp_[size_t(t)] = row[t] - lse;
    const float minus_inf = -__builtin_inff();
    if (pad_mask_ >= 0) logp_[size_t(pad_mask_)] = minus_inf;
    if (mask_eos()) logp_[size_t(eos_id_)] = minus_inf;
    if (force_eos() || forced >= 0) {
      const int only = force_eos() ? eos_id_ : forced;
      std::fill(logp_.begin(), logp_.end(), minus_inf);
      logp_[size_t(only)] = 0.f;
    }
    // Its best 2 x beam tokens (as the engine's top-k) and those that advance its constraints.
    row_tokens_.assign(size_t(2 * beam), 0);
    search_detail::top_n(logp_.data(), vocab, 2 * beam, row_tokens_.data());
    constraints_->advancing(states_[size_t(b)], &row_tokens_);
    for (size_t i = 0; i < row_tokens_.size(); ++i) {
      const int token = row_tokens_[i];
      if (std::find(row_tokens_.begin(), row_tokens_.begin() + long(i), token) != row_tokens_.begin() + long(i))
        continue;  // proposed twice
      const float lp = logp_[size_t(token)];
      if (!std::isfinite(lp)) continue;
      const PhraseConstraints::State s = constraints_->next(states_[size_t(b)], token);
      const int need = constraints_->need(s);
      const Candidate c{r.score + lp, b, token, s};
      if (token == eos_id_ || at_max) {
        if (need == 0) ending_.push_back(c);  // EOS (or the last token) only with every term in
      } else if (need <= room) {
        continuing_.push_back(c);
      }
    }
  }
  auto better = [](const Candidate& a, const Candidate& b) { return a.score > b.score; };
  std::stable_sort(ending_.begin(), ending_.end(), better);
  std::stable_sort(continuing_.begin(), continuing_.end(), better);
  auto node_of = [&](const Candidate& c) {
    return extend(running_[size_t(c.beam)].node, c.token, c.score, alignments ? alignments[c.beam] : -1);
  };
  // Finished: the hypotheses that end here with every term, length-normalized, merged with
  // the slots so far, the beam best kept (ties to the earlier slot), while an improvement is
  // possible (the early-stop heuristic below).
  if (improvable_) {
    for (const Candidate& c : ending_) {
      const float v = c.score / norm;
      auto at = std::find_if(finished_.begin(), finished_.end(), [&](const Finished& f) { return v > f.score; });
      if (at == finished_.end()) break;  // sorted: none after it enters either
      finished_.insert(at, Finished{node_of(c), v, true});
      finished_.pop_back();
    }
  }
  // Running: round-robin over the banks (constraint tokens held), the most advanced first.
  const int banks = constraints_->total() + 1;
  std::vector<std::vector<const Candidate*>> bank(static_cast<size_t>(banks));
  for (const Candidate& c : continuing_) bank[size_t(constraints_->progress(c.state))].push_back(&c);
  std::vector<size_t> taken(size_t(banks), 0);
  std::vector<const Candidate*> chosen;
  for (bool any = true; any && int(chosen.size()) < beam;) {
    any = false;
    for (int k = banks - 1; k >= 0 && int(chosen.size()) < beam; --k) {
      if (taken[size_t(k)] >= bank[size_t(k)].size()) continue;
      chosen.push_back(bank[size_t(k)][taken[size_t(k)]++]);
      any = true;
    }
  }
  if (chosen.empty()) {  // every live candidate ended
    if (finished_[0].node < 0)
      throw Error(ErrorCode::kInternal, "glossary: no hypothesis can hold every required target term");
    return true;
  }
  std::vector<PhraseConstraints::State> next_states(static_cast<size_t>(beam));
  for (int b = 0; b < beam; ++b) {
    // a slot no candidate fills repeats the first chosen, dead (it is stepped, never continued)
    const Candidate& c = *chosen[size_t(std::min(b, int(chosen.size()) - 1))];
    Beam& n = next_running_[size_t(b)];
    n.node = node_of(c);
    n.score = b < int(chosen.size()) ? c.score : kNeg;
    next_parents_[size_t(b)] = c.beam;
    next_states[size_t(b)] = c.state;
  }
  running_.swap(next_running_);
  states_.swap(next_states);
  // Early stop (as advance_beam): can the best running hypothesis still beat a finished one?
  float best = kNeg;
  for (const Candidate* c : chosen) best = std::max(best, c->score);
  const float best_possible = best / norm;
  float worst = finished_[0].score;
  for (const Finished& f : finished_) worst = std::min(worst, f.score);
  bool improvement = false;
  for (const Finished& f : finished_) improvement = improvement || best_possible > (f.done ? worst : kNeg);
  improvable_ = improvable_ && improvement;
  if (!improvable_ || at_max) {
    if (finished_[0].node < 0)
      throw Error(ErrorCode::kInternal, "glossary: no hypothesis can hold every required target term");
    return true;
  }
  set_next_rows(next_parents_.data());
  return false;
}

}  // namespace nmt
