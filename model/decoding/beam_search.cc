#include "model/decoding/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "model/decoding/engine.h"
#include "model/error.h"

namespace nmt {

using search_detail::kNeg;
using search_detail::length_norm;
using search_detail::top_n;

// Descending, the lower index first on ties, as torch.topk (and a stable sort). An insertion
// into a prefix of at most n: a step ranks 3 x beam values, and a sort's buffers cost more
// than the ranking.
void search_detail::top_n(const float* scores, int size, int n, int* order) {
  int filled = 0;
  for (int i = 0; i < size; ++i) {
    int at = filled;
    while (at > 0 && scores[order[at - 1]] < scores[i]) --at;
    if (at >= n) continue;
    for (int m = std::min(filled, n - 1); m > at; --m) order[m] = order[m - 1];
    order[at] = i;
    filled = std::min(filled + 1, n);
  }
}

// transformers divides by generated ** length_penalty in Python floats: with the default
// penalty 1 that is the length itself, without a powf per sentence and step.
float search_detail::length_norm(int generated, float penalty) {
  return penalty == 1.f ? float(generated) : std::pow(float(generated), penalty);
}

void continuing_beams(const float* scores, const char* hits, int k, int beam, float* running, int* keep) {
  for (int j = 0; j < k; ++j) running[j] = scores[j] + (hits[j] ? kNeg : 0.f);
  top_n(running, k, beam, keep);
}

SentenceSearch::SentenceSearch(const DecodeOptions& options, const ModelConfig& config)
    : options_(options),
      eos_id_(config.eos_id),
      forced_eos_(config.forced_eos),
      forced_bos_(options.forced_bos_id >= 0 ? options.forced_bos_id : config.forced_bos_id),
      start_id_(config.decoder_start_id),
      samples_(options.samples()) {
  const size_t beam = size_t(options.rows());
  running_.assign(beam, Beam{});
  // one live beam at first; every sample is live
  for (size_t b = 1; b < beam && !samples_; ++b) running_[b].score = kNeg;
  if (samples_) {
    sampling_ = {options.sampling_topk, options.sampling_topp, options.sampling_temperature};
    seed_ = options.has_seed ? options.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    pad_mask_ = config.mask_pad ? config.pad_id : -1;
  }
  finished_.assign(beam, Finished{-1, kNeg, false});
  next_running_.assign(beam, Beam{});
  next_finished_.assign(beam, Finished{-1, kNeg, false});
  const size_t k = size_t(this->k());
  hits_.assign(k, 0);
  cand_beam_.assign(k, 0);
  cand_token_.assign(k, 0);
  running_view_.assign(k, 0.f);
  merged_.assign(beam + k, 0.f);
  keep_.assign(beam, 0);
  order_.assign(beam, 0);
  next_parents_.assign(beam, 0);
  tokens_tree_.reserve(2 * beam * 32);  // a step adds at most 2 x beam nodes
  tokens_.assign(beam, config.decoder_start_id);
  parents_.resize(beam);
  std::iota(parents_.begin(), parents_.end(), 0);
  for (const Beam& b : running_) running_scores_.push_back(b.score);
  if (forced_bos_ >= 0) forced_.push_back(forced_bos_);
  if (options.score) {
    teacher_from_ = int(forced_.size());
    forced_.insert(forced_.end(), options.score_target.begin(), options.score_target.end());
    forced_.push_back(eos_id_);
  } else if (!options.target_prefix.empty()) {
    forced_.insert(forced_.end(), options.target_prefix.begin(), options.target_prefix.end());
    prompt_ = int(forced_.size());
  }
  if (options.constrained()) {
    constraints_ = std::make_unique<const PhraseConstraints>(options.glossary_phrases);
    states_.assign(beam, PhraseConstraints::State{});
    pad_mask_ = config.mask_pad ? config.pad_id : -1;
  }
}

int SentenceSearch::k() const { return topk_for_beam(beam()); }

bool SentenceSearch::advance(const float* scores, const int* candidates, int vocab, const int* alignments,
                             const float* logits) {
  const bool done = samples_                    ? advance_sample(logits, vocab)
                    : constrained()             ? advance_constrained(logits, vocab, alignments)
                    : options_.beam_size == 1 ? advance_greedy(scores, candidates, vocab, alignments)
                                              : advance_beam(scores, candidates, vocab, alignments);
  ++step_;
  return done;
}

int SentenceSearch::extend(int node, int token, float score, int source) {
  tokens_tree_.push_back({token, node, source, score});
  return int(tokens_tree_.size()) - 1;
}

std::vector<int> SentenceSearch::path(int node) const {
  std::vector<int> ids;
  for (; node >= 0; node = tokens_tree_[size_t(node)].parent) ids.push_back(tokens_tree_[size_t(node)].token);
  std::reverse(ids.begin(), ids.end());
  return ids;
}

std::vector<float> SentenceSearch::path_scores(int node) const {
  std::vector<float> scores;
  for (; node >= 0; node = tokens_tree_[size_t(node)].parent) {
    const Node& n = tokens_tree_[size_t(node)];
    scores.push_back(n.score - (n.parent >= 0 ? tokens_tree_[size_t(n.parent)].score : 0.f));
  }
  std::reverse(scores.begin(), scores.end());
  return scores;
}

std::vector<int> SentenceSearch::sources(int node) const {
  std::vector<int> s;
  for (; node >= 0; node = tokens_tree_[size_t(node)].parent) s.push_back(tokens_tree_[size_t(node)].source);
  std::reverse(s.begin(), s.end());
  return s;
}

bool SentenceSearch::advance_greedy(const float* scores, const int* candidates, int vocab, const int* alignments) {
  Beam& b = running_[0];
  const int token = candidates[0] % vocab;
  b.node = extend(b.node, token, scores[0], alignments ? alignments[0] : -1);
  b.score = scores[0];
  // A prompt step (target_prefix) ends nothing: its token is forced, and it is not EOS.
  const bool done = step_ >= prompt_ && (token == eos_id_ || last_step());
  if (done) {
    finished_[0] = {b.node, b.score / length_norm(step_ + 1 - prompt_, options_.length_penalty), true};
    return true;
  }
  const int parent = 0;
  set_next_rows(&parent);
  return false;
}

// Allocates nothing but the new tokens' nodes (amortized) and copies no history: the decode
// loop advances every active sentence between two GPU steps, on the step's critical path.
bool SentenceSearch::advance_beam(const float* cand_score, const int* cand, int vocab, const int* alignments) {
  const int beam = options_.beam_size, k = this->k();
  const bool at_max = last_step();
  // A prompt step (target_prefix: forced, never EOS nor at the maximum length) only moves the
  // running beams on, as transformers feeds decoder_input_ids without searching.
  const bool prompt = step_ < prompt_;
  // Each candidate's beam and token: the quotient through a reciprocal, corrected to the
  // exact one (it is off by at most 1), where an integer division per candidate costs tens
  // of cycles on the step's critical path.
  const double inverse = 1.0 / vocab;
  for (int j = 0; j < k; ++j) {
    int b = int(double(cand[j]) * inverse);
    int token = cand[j] - b * vocab;
    if (token < 0) {
      --b;
      token += vocab;
    } else if (token >= vocab) {
      ++b;
      token -= vocab;
    }
    cand_beam_[size_t(j)] = b;
    cand_token_[size_t(j)] = token;
    hits_[size_t(j)] = token == eos_id_ || at_max;
  }
  // Candidate j's tokens: its beam's and its own.
  auto history = [&](int j) {
    const int b = cand_beam_[size_t(j)];
    return extend(running_[size_t(b)].node, cand_token_[size_t(j)], cand_score[j], alignments ? alignments[b] : -1);
  };
  // transformers' cur_len + 1 - decoder_prompt_len: the prompt's tokens do not count.
  const float norm = prompt ? 1.f : length_norm(step_ + 1 - prompt_, options_.length_penalty);

  // Running beams: the best `beam` candidates that did not just stop.
  continuing_beams(cand_score, hits_.data(), k, beam, running_view_.data(), keep_.data());
  // The next running beams (and the rows they continue) from the kept candidates.
  auto next_beams = [&] {
    for (int b = 0; b < beam; ++b) {
      const int j = keep_[size_t(b)];
      Beam& r = next_running_[size_t(b)];
      r.node = history(j);
      r.score = running_view_[size_t(j)];
      next_parents_[size_t(b)] = cand_beam_[size_t(j)];
    }
  };
  if (prompt) {
    next_beams();
    running_.swap(next_running_);
    set_next_rows(next_parents_.data());
    return false;
  }
  // Finished hypotheses: only the top `beam` candidates may enter, length-normalized, and
  // only while the heuristic says an improvement is still possible.
  for (int b = 0; b < beam; ++b) merged_[size_t(b)] = finished_[size_t(b)].score;
  for (int j = 0; j < k; ++j) {
    float v = cand_score[j] / norm;
    if (!improvable_) v += kNeg;
    if (!(hits_[size_t(j)] && j < beam)) v += kNeg;
    merged_[size_t(beam + j)] = v;
  }
  top_n(merged_.data(), beam + k, beam, order_.data());
  for (int i = 0; i < beam; ++i) {
    const int m = order_[size_t(i)];
    Finished& f = next_finished_[size_t(i)];
    if (m < beam) {
      f = finished_[size_t(m)];
    } else {
      const int j = m - beam;
      f.node = history(j);
      f.score = merged_[size_t(m)];
      f.done = hits_[size_t(j)] && j < beam;
    }
  }
  next_beams();
  finished_.swap(next_finished_);
  running_.swap(next_running_);
  // Early-stop heuristic (early_stopping=False): can the best running beam, normalized by
  // the current length, still beat a finished slot?
  const float best_possible = running_[0].score / norm;
  float worst = finished_[0].score;
  for (const Finished& f : finished_) worst = std::min(worst, f.score);
  bool improvement = false;
  for (const Finished& f : finished_) improvement = improvement || best_possible > (f.done ? worst : kNeg);
  improvable_ = improvable_ && improvement;
  if (!improvable_ || at_max) return true;
  set_next_rows(next_parents_.data());
  return false;
}

void SentenceSearch::set_next_rows(const int* parents) {
  for (size_t b = 0; b < running_.size(); ++b) {
    tokens_[b] = tokens_tree_[size_t(running_[b].node)].token;
    parents_[b] = parents[b];
    running_scores_[b] = running_[b].score;
  }
}

// Sample h draws with the key (seed, h, step) from its own row's logits: nothing else in the
// loop, nor the other samples' draws, changes its tokens. A finished sample's row is still
// computed (a sentence's rows step together) and its draw skipped.
bool SentenceSearch::advance_sample(const float* logits, int vocab) {
  if (!logits) throw Error(ErrorCode::kInternal, "decode loop: a sampling sentence got no logits from the engine");
  const bool at_max = last_step();
  const SampleMasks masks{pad_mask_, eos_id_, mask_eos(), force_eos(), forced_token()};
  const float norm = length_norm(step_ + 1, options_.length_penalty);
  bool all_done = true;
  for (size_t h = 0; h < running_.size(); ++h) {
    Finished& f = finished_[h];
    if (f.done) continue;
    const float* row = logits + h * size_t(vocab);
    if (options_.repetition_controls()) {
      edit_tokens_.clear();
      edit_factors_.clear();
      token_edits(int(h), &edit_tokens_, &edit_factors_);
      if (!edit_tokens_.empty()) {
        edited_.assign(row, row + vocab);
        for (size_t e = 0; e < edit_tokens_.size(); ++e)
          edited_[size_t(edit_tokens_[e])] = edited_score(edited_[size_t(edit_tokens_[e])], edit_factors_[e]);
        row = edited_.data();
      }
    }
    const Sample s = sampler_.draw(row, vocab, masks, sampling_, sample_uniform(seed_, int(h), step_));
    Beam& b = running_[h];
    b.score += s.logprob;
    b.node = extend(b.node, s.token, b.score);
    if (s.token == eos_id_ || at_max) {
      f = {b.node, b.score / norm, true};
    } else {
      all_done = false;
    }
  }
  if (all_done) return true;
  for (size_t h = 0; h < running_.size(); ++h) {
    tokens_[h] = tokens_tree_[size_t(running_[h].node)].token;
    parents_[h] = int(h);
    running_scores_[h] = running_[h].score;
  }
  return false;
}

DecodeResult SentenceSearch::result() const {
  DecodeResult r;
  const int n = samples_ ? beam() : options_.beam_size == 1 ? 1 : options_.num_hypotheses;
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Samples best score first (ties: the lower sample); the beam's slots are ranked already.
  if (samples_) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return finished_[size_t(a)].score > finished_[size_t(b)].score; });
  }
  for (int h : order) {
    // A constrained search's slot that no hypothesis holding every term reached stays empty
    // rather than returning one without them (controls/glossary_search.cc).
    if (constrained() && finished_[size_t(h)].node < 0) continue;
    r.ids.push_back(path(finished_[size_t(h)].node));
    r.scores.push_back(finished_[size_t(h)].score);
    r.token_scores.push_back(path_scores(finished_[size_t(h)].node));
  }
  if (options_.return_alignments) r.alignments = sources(finished_[0].node);
  return r;
}

void SentenceSearch::token_edits(int b, std::vector<int>* tokens, std::vector<float>* factors) {
  if (!options_.repetition_controls() || force_eos() || forced_token() >= 0) return;
  history_.clear();
  for (int node = running_[size_t(b)].node; node >= 0; node = tokens_tree_[size_t(node)].parent)
    history_.push_back(tokens_tree_[size_t(node)].token);
  history_.push_back(start_id_);
  std::reverse(history_.begin(), history_.end());
  edits_.append(history_, options_, tokens, factors);
}

}  // namespace nmt
