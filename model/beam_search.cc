#include "model/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/engine.h"

namespace nmt {
namespace {

// transformers marks impossible scores with -1e9 rather than -inf; the same constant keeps
// the comparisons (and so the chosen hypotheses) identical.
constexpr float kNeg = -1.0e9f;

// Indices of the top n of scores (descending, lower index first on ties), as torch.topk.
std::vector<int> top_n(const std::vector<float>& scores, int n) {
  std::vector<int> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  order.resize(size_t(n));
  return order;
}

float length_norm(int generated, float penalty) { return std::pow(float(generated), penalty); }

}  // namespace

SentenceSearch::SentenceSearch(const DecodeOptions& options, const ModelConfig& config)
    : options_(options), eos_id_(config.eos_id) {
  const size_t beam = size_t(options.beam_size);
  running_.assign(beam, Beam{});
  for (size_t b = 1; b < beam; ++b) running_[b].score = kNeg;  // one live beam at first
  finished_.assign(beam, Finished{{}, kNeg, false});
  tokens_.assign(beam, config.decoder_start_id);
  parents_.resize(beam);
  std::iota(parents_.begin(), parents_.end(), 0);
  for (const Beam& b : running_) running_scores_.push_back(b.score);
}

int SentenceSearch::k() const { return topk_for_beam(options_.beam_size); }

bool SentenceSearch::advance(const float* scores, const int* candidates, int vocab) {
  const bool done = options_.beam_size == 1 ? advance_greedy(scores, candidates, vocab)
                                            : advance_beam(scores, candidates, vocab);
  ++step_;
  return done;
}

bool SentenceSearch::advance_greedy(const float* scores, const int* candidates, int vocab) {
  Beam& b = running_[0];
  b.ids.push_back(candidates[0] % vocab);
  b.score = scores[0];
  const bool done = b.ids.back() == eos_id_ || force_eos();
  if (done) {
    finished_[0] = {b.ids, b.score / length_norm(step_ + 1, options_.length_penalty), true};
    return true;
  }
  set_next_rows({0});
  return false;
}

bool SentenceSearch::advance_beam(const float* cand_score, const int* cand, int vocab) {
  const int beam = options_.beam_size, k = this->k();
  const bool at_max = force_eos();
  auto cand_ids = [&](int j) {  // candidate j's tokens
    std::vector<int> ids = running_[size_t(cand[j] / vocab)].ids;
    ids.push_back(cand[j] % vocab);
    return ids;
  };
  std::vector<bool> hits(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) hits[size_t(j)] = cand[j] % vocab == eos_id_ || at_max;
  const float norm = length_norm(step_ + 1, options_.length_penalty);

  // Running beams: the best `beam` candidates that did not just stop.
  std::vector<float> running_view(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) running_view[size_t(j)] = cand_score[j] + (hits[size_t(j)] ? kNeg : 0.f);
  const std::vector<int> keep = top_n(running_view, beam);
  // Finished hypotheses: only the top `beam` candidates may enter, length-normalized, and
  // only while the heuristic says an improvement is still possible.
  std::vector<float> merged(static_cast<size_t>(beam + k));
  for (int b = 0; b < beam; ++b) merged[size_t(b)] = finished_[size_t(b)].score;
  for (int j = 0; j < k; ++j) {
    float v = cand_score[j] / norm;
    if (!improvable_) v += kNeg;
    if (!(hits[size_t(j)] && j < beam)) v += kNeg;
    merged[size_t(beam + j)] = v;
  }
  std::vector<Finished> next_finished;
  for (int m : top_n(merged, beam)) {
    if (m < beam) {
      next_finished.push_back(finished_[size_t(m)]);
    } else {
      const int j = m - beam;
      next_finished.push_back({cand_ids(j), merged[size_t(m)], hits[size_t(j)] && j < beam});
    }
  }
  std::vector<Beam> next_running;
  std::vector<int> parents;
  for (int j : keep) {
    next_running.push_back({cand_ids(j), running_view[size_t(j)]});
    parents.push_back(cand[j] / vocab);
  }
  finished_.swap(next_finished);
  running_.swap(next_running);
  // Early-stop heuristic (early_stopping=False): can the best running beam, normalized by
  // the current length, still beat a finished slot?
  const float best_possible = running_[0].score / norm;
  float worst = finished_[0].score;
  for (const Finished& f : finished_) worst = std::min(worst, f.score);
  bool improvement = false;
  for (const Finished& f : finished_) improvement = improvement || best_possible > (f.done ? worst : kNeg);
  improvable_ = improvable_ && improvement;
  if (!improvable_ || at_max) return true;
  set_next_rows(parents);
  return false;
}

void SentenceSearch::set_next_rows(const std::vector<int>& parents) {
  for (size_t b = 0; b < parents.size(); ++b) {
    tokens_[b] = running_[b].ids.back();
    parents_[b] = parents[b];
    running_scores_[b] = running_[b].score;
  }
}

DecodeResult SentenceSearch::result() const {
  DecodeResult r;
  const int n = options_.beam_size == 1 ? 1 : options_.num_hypotheses;
  for (int h = 0; h < n; ++h) {
    r.ids.push_back(finished_[size_t(h)].ids);
    r.scores.push_back(finished_[size_t(h)].score);
  }
  return r;
}

}  // namespace nmt
