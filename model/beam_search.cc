#include "model/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace nmt {
namespace {

// transformers marks impossible scores with -1e9 rather than -inf; the same constant keeps
// the comparisons (and so the chosen hypotheses) identical.
constexpr float kNeg = -1.0e9f;

struct Beam {
  std::vector<int> ids;
  float score = 0.f;
};

struct Finished {
  std::vector<int> ids;
  float score = kNeg;
  bool done = false;  // transformers' is_sent_finished for this slot
};

// Per-sentence state of the beam search.
struct Sentence {
  size_t index = 0;             // position in the batch
  std::vector<Beam> running;    // beam_size beams, best first
  std::vector<Finished> finished;  // beam_size slots, best first
  bool improvable = true;       // transformers' is_early_stop_heuristic_unsatisfied
};

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

std::vector<DecodeResult> decode(Engine& engine, size_t n, const ModelConfig& config,
                                 const DecodeOptions& opt, const CancelFn& cancelled,
                                 BatchStats* stats) {
  const bool greedy = opt.beam_size == 1;
  const int beam = opt.beam_size;
  const int vocab = engine.vocab_size();
  // Greedy keeps one candidate; beam search keeps 2 x beam so that `beam` of them can go on
  // even when the best `beam` all end in EOS.
  const int k = greedy ? 1 : 2 * beam;

  std::vector<Sentence> sent(n);
  for (size_t i = 0; i < n; ++i) {
    sent[i].index = i;
    sent[i].running.assign(size_t(beam), Beam{});
    for (int b = 1; b < beam; ++b) sent[i].running[size_t(b)].score = kNeg;  // one live beam at first
    sent[i].finished.assign(size_t(beam), Finished{});
  }
  std::vector<DecodeResult> results(n);
  std::vector<size_t> alive(n);  // row-group order of the sentences still decoding
  std::iota(alive.begin(), alive.end(), 0);

  std::vector<int> tokens(n * size_t(beam), config.decoder_start_id);
  std::vector<float> running_scores;
  for (size_t i = 0; i < n; ++i) {
    for (const Beam& b : sent[i].running) running_scores.push_back(b.score);
  }
  std::vector<int> parents;
  StepOutput out;
  for (int t = 0; !alive.empty(); ++t) {
    StepInput in;
    in.tokens = &tokens;
    in.parent_rows = t == 0 ? nullptr : &parents;
    in.running_scores = &running_scores;
    in.step = t;
    in.beam = beam;
    in.k = k;
    in.mask_eos = t < opt.min_decoding_length;
    in.force_eos = t + 1 >= opt.max_decoding_length;
    engine.step(in, &out);
    if (stats) stats->decode_steps++;

    const bool at_max = t + 1 >= opt.max_decoding_length;
    std::vector<size_t> next_alive;
    std::vector<int> next_tokens, next_parents;
    std::vector<float> next_scores;
    for (size_t g = 0; g < alive.size(); ++g) {
      Sentence& s = sent[alive[g]];
      if (cancelled && cancelled(s.index)) {
        results[s.index].cancelled = true;
        continue;
      }
      const float* cand_score = out.scores.data() + g * size_t(k);
      const int* cand = out.candidates.data() + g * size_t(k);
      auto cand_beam = [&](int j, float score) {  // candidate j as a hypothesis
        Beam b{s.running[size_t(cand[j] / vocab)].ids, score};
        b.ids.push_back(cand[j] % vocab);
        return b;
      };
      std::vector<bool> hits(static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) hits[size_t(j)] = cand[j] % vocab == config.eos_id || at_max;
      const float norm = length_norm(t + 1, opt.length_penalty);

      std::vector<int> keep(1, 0);  // candidates that continue as the running beams
      bool done;
      if (greedy) {
        s.running[0] = cand_beam(0, cand_score[0]);
        done = hits[0];
        if (done) s.finished[0] = {s.running[0].ids, cand_score[0] / norm, true};
      } else {
        // Running beams: the best `beam` candidates that did not just stop.
        std::vector<float> running_view(static_cast<size_t>(k));
        for (int j = 0; j < k; ++j) running_view[size_t(j)] = cand_score[j] + (hits[size_t(j)] ? kNeg : 0.f);
        keep = top_n(running_view, beam);
        // Finished hypotheses: only the top `beam` candidates may enter, length-normalized,
        // and only while the heuristic says an improvement is still possible.
        std::vector<float> merged(static_cast<size_t>(beam + k));
        for (int b = 0; b < beam; ++b) merged[size_t(b)] = s.finished[size_t(b)].score;
        for (int j = 0; j < k; ++j) {
          float v = cand_score[j] / norm;
          if (!s.improvable) v += kNeg;
          if (!(hits[size_t(j)] && j < beam)) v += kNeg;
          merged[size_t(beam + j)] = v;
        }
        std::vector<Finished> next_finished;
        for (int m : top_n(merged, beam)) {
          if (m < beam) {
            next_finished.push_back(s.finished[size_t(m)]);
          } else {
            const int j = m - beam;
            next_finished.push_back({cand_beam(j, 0.f).ids, merged[size_t(m)], hits[size_t(j)] && j < beam});
          }
        }
        std::vector<Beam> next_running;
        for (int j : keep) next_running.push_back(cand_beam(j, running_view[size_t(j)]));
        s.finished.swap(next_finished);
        s.running.swap(next_running);
        // Early-stop heuristic (early_stopping=False): can the best running beam, normalized
        // by the current length, still beat a finished slot?
        const float best_possible = s.running[0].score / norm;
        float worst = s.finished[0].score;
        for (const Finished& f : s.finished) worst = std::min(worst, f.score);
        bool improvement = false;
        for (const Finished& f : s.finished) improvement = improvement || best_possible > (f.done ? worst : kNeg);
        s.improvable = s.improvable && improvement;
        done = !s.improvable || at_max;
      }
      if (done) continue;
      for (size_t b = 0; b < keep.size(); ++b) {
        next_tokens.push_back(s.running[b].ids.back());
        next_parents.push_back(int(g) * beam + cand[keep[b]] / vocab);
        next_scores.push_back(s.running[b].score);
      }
      next_alive.push_back(alive[g]);
    }
    alive.swap(next_alive);
    tokens.swap(next_tokens);
    parents.swap(next_parents);
    running_scores.swap(next_scores);
  }

  for (size_t i = 0; i < n; ++i) {
    if (results[i].cancelled) continue;
    for (int h = 0; h < opt.num_hypotheses; ++h) {
      const Finished& f = sent[i].finished[size_t(h)];
      results[i].ids.push_back(f.ids);
      results[i].scores.push_back(f.score);
      if (stats) stats->output_tokens += int64_t(f.ids.size());
      if (greedy) break;
    }
  }
  return results;
}

}  // namespace nmt
