#pragma once
// Host-side search of one sentence that reproduces transformers' generate(): greedy search
// for beam 1 and the vectorized beam search (with its early-stop heuristic,
// early_stopping=False) otherwise. The engine does the per-step math; this class only keeps
// the sentence's hypotheses, so that each sentence of a decode loop advances on its own.
#include <memory>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/decode_options.h"
#include "model/decoding/controls/phrase_constraints.h"
#include "model/decoding/controls/sampler.h"
#include "model/decoding/controls/token_edits.h"

namespace nmt {

// What beam_search.cc and controls/glossary_search.cc (both SentenceSearch's) share.
namespace search_detail {
// transformers marks impossible scores with -1e9 rather than -inf; the same constant keeps
// the comparisons (and so the chosen hypotheses) identical.
constexpr float kNeg = -1.0e9f;
float length_norm(int generated, float penalty);  // generated ** length_penalty
// The indices of the n best of scores[0, size) into order[0, n), the lower index first on ties.
void top_n(const float* scores, int size, int n, int* order);
}  // namespace search_detail

// The beams a sentence goes on with after a step of beam search (transformers' running beams):
// the `beam` best of its k candidates once those that end a hypothesis (hits[j]: EOS, or any
// candidate at the maximum length) are pushed below every other by -1e9. Writes each
// candidate's running score to running[0, k) and the candidate of beam b to keep[b], best
// first, ties to the lower candidate. The CUDA engine's top-k makes the same choice on the
// device (kernels::NextRows), so that a step can follow the one before it without waiting for
// the host: the two must agree to the bit.
void continuing_beams(const float* scores, const char* hits, int k, int beam, float* running, int* keep);

struct DecodeResult {
  std::vector<std::vector<int>> ids;  // best first, num_hypotheses of them; EOS included
  std::vector<float> scores;
  // return_alignments: the best hypothesis' source position per token of ids[0] (the row
  // that produced the token: StepOutput::alignments); empty otherwise.
  std::vector<int> alignments;
  std::vector<std::vector<float>> token_scores;  // per id of ids, its log-prob
};

class SentenceSearch {
 public:
  SentenceSearch(const DecodeOptions& options, const ModelConfig& config);

  int beam() const { return options_.rows(); }  // its rows: beams, or samples (DecodeOptions::rows)
  int k() const;         // candidates asked of the engine per step
  bool alignments() const { return options_.return_alignments; }  // StepGroup::alignments
  int position() const { return step_; }  // decoder position of the next step's tokens
  // The top-k's EOS masks of the step `ahead` steps after the next one (a step submitted
  // before the host has taken the ones in flight).
  bool mask_eos(int ahead = 0) const { return step_ + ahead < options_.min_decoding_length; }
  // The step at the maximum length: every candidate ends a hypothesis (the sentence's last).
  bool last_step(int ahead = 0) const { return step_ + ahead + 1 >= options_.max_decoding_length; }
  // ... where EOS is also forced (models with forced_eos_token_id).
  bool force_eos(int ahead = 0) const { return forced_eos_ && last_step(ahead); }
  // The token forced at that step, or -1: the first generated one (forced_bos), then the
  // target_prefix's tokens, or a score request's target and its EOS.
  int forced_token(int ahead = 0) const {
    const size_t s = size_t(step_ + ahead);
    return s < forced_.size() ? forced_[s] : -1;
  }
  // Whether that step's forced token carries its real log-prob (a score request's target).
  bool teacher_forced(int ahead = 0) const {
    const int s = step_ + ahead;
    return s >= teacher_from_ && size_t(s) < forced_.size();
  }

  // The next step's rows, beam of them: token fed, the beam (row in the sentence) whose
  // history it continues, and the running score.
  const std::vector<int>& tokens() const { return tokens_; }
  const std::vector<int>& parents() const { return parents_; }
  const std::vector<float>& running_scores() const { return running_scores_; }

  // Takes the step's k candidates (best first; candidate = beam_row * vocab + token) and
  // returns true when the sentence is finished. `alignments` (return_alignments): the step's
  // StepOutput::alignments of this sentence's rows, kept with each token the row produced. A
  // sampling sentence draws from `logits` instead (its rows' StepOutput::logits, beam() x
  // vocab) and ignores the candidates.
  bool advance(const float* scores, const int* candidates, int vocab, const int* alignments = nullptr,
               const float* logits = nullptr);

  // Sampling (DecodeOptions::samples, sampler.h): each row is an independent sample drawn on
  // the host, so the engine returns the rows' logits (StepGroup::return_logits).
  bool samples() const { return samples_; }
  // Glossary (DecodeOptions::glossary_phrases): constrained beam search on the host from the
  // rows' logits (controls/glossary_search.cc).
  bool constrained() const { return constraints_ != nullptr; }
  // The engine returns this sentence's rows' logits (StepGroup::return_logits).
  bool returns_logits() const { return samples_ || constrained(); }

  DecodeResult result() const;  // once finished

  // Whether the next step's inputs depend on this sentence's host state beyond its beams'
  // tokens, parents and scores (the repetition controls' edits, from each beam's history;
  // sampling's draws): such a sentence never follows a step in flight (StepGroup::follows
  // stays -1), and a decode loop that holds one keeps a single step in flight (DecodeLoop,
  // docs/decoding.md).
  bool host_steps() const { return options_.repetition_controls() || samples_ || constrained(); }
  // Whether its controls are only those an engine may compute on the device
  // (Engine::repetition_on_device(): no_repeat_ngram_size, repetition_penalty; no sampling,
  // no suppress_sequences, no glossary): on such an engine it does not step from its host state.
  const DecodeOptions& options() const { return options_; }
  bool device_repetition() const {
    return !samples_ && !constrained() && options_.suppress_sequences.empty() &&
           (options_.no_repeat_ngram_size > 0 || options_.repetition_penalty != 1.f);
  }
  // Appends beam b's token edits for the next step (StepInput::edit_tokens / edit_factors);
  // none at a step whose token is forced (a forced token wins over them).
  void token_edits(int b, std::vector<int>* tokens, std::vector<float>* factors);

 private:
  // A hypothesis's tokens are a path in tokens_tree_: its last token's node, whose parents
  // lead back to its first (-1: no token yet). A step adds nodes and copies no history.
  struct Node {
    int token;
    int parent;
    int source = -1;  // return_alignments: the source position the producing row aligned to
    float score;  // the running score with this token: token_scores are the differences
  };
  struct Beam {
    int node = -1;
    float score = 0.f;
  };
  struct Finished {
    int node;
    float score;
    bool done;  // transformers' is_sent_finished for this slot
  };
  // a new node: `node`'s path and `token`, with its running score and (return_alignments) the
  // source position the producing row aligned to
  int extend(int node, int token, float score, int source = -1);
  std::vector<int> sources(int node) const;  // path()'s alignments
  std::vector<int> path(int node) const;
  std::vector<float> path_scores(int node) const;  // each token's log-prob along path()
  bool advance_greedy(const float* scores, const int* candidates, int vocab, const int* alignments);
  bool advance_beam(const float* scores, const int* candidates, int vocab, const int* alignments);
  void set_next_rows(const int* parents);  // one per running beam
  bool advance_sample(const float* logits, int vocab);  // each unfinished sample draws its token
  // Glossary: the step's candidates from the rows' logits (controls/glossary_search.cc).
  bool advance_constrained(const float* logits, int vocab, const int* alignments);

  const DecodeOptions options_;
  const int eos_id_;
  const bool forced_eos_;  // ModelConfig::forced_eos
  const int forced_bos_;   // the first generated token, or -1 (DecodeOptions, else the model's)
  int step_ = 0;
  // Tokens forced at steps 0, 1, ... (forced_token()); the first prompt_ of them are the
  // prompt (a target_prefix and the forced first token before it: not scored, not counted in
  // the length normalisation); from teacher_from_ on they are a score request's target.
  std::vector<int> forced_;
  int prompt_ = 0;
  int teacher_from_ = 1 << 30;
  std::vector<Beam> running_;       // beam_size beams, best first
  std::vector<Finished> finished_;  // beam_size slots, best first
  bool improvable_ = true;          // transformers' is_early_stop_heuristic_unsatisfied
  std::vector<int> tokens_, parents_;
  std::vector<float> running_scores_;
  std::vector<Node> tokens_tree_;
  // advance_beam's scratch, sized once: the next beams and slots, the candidates' beams,
  // tokens, EOS hits and scores, and the rankings.
  std::vector<Beam> next_running_;
  std::vector<Finished> next_finished_;
  std::vector<char> hits_;
  std::vector<float> running_view_, merged_;
  std::vector<int> cand_beam_, cand_token_, keep_, order_, next_parents_;

  // Repetition controls: the decoder start token (every beam's first, as transformers'
  // input_ids), the edits' marks and a beam's history, reused.
  const int start_id_;
  TokenEdits edits_;
  std::vector<int> history_;

  // Sampling: the warpers' parameters, the key of the draws, the pad mask the engines apply
  // (ModelConfig::mask_pad), and the sampler's scratch.
  const bool samples_;
  SamplingParams sampling_;
  uint64_t seed_ = 0;
  int pad_mask_ = -1;
  Sampler sampler_;
  // With repetition controls: a row's edits and its logits edited (as transformers' _sample
  // applies its processors to the logits before the warpers).
  std::vector<int> edit_tokens_;
  std::vector<float> edit_factors_, edited_;

  // Glossary: the sentence's phrases, each running beam's state against them, and the
  // constrained step's scratch (controls/glossary_search.cc).
  struct Candidate {
    float score;
    int beam, token;
    PhraseConstraints::State state;
  };
  std::unique_ptr<const PhraseConstraints> constraints_;
  std::vector<PhraseConstraints::State> states_;
  std::vector<float> logp_;
  std::vector<int> row_tokens_;
  std::vector<Candidate> continuing_, ending_;
};

}  // namespace nmt
