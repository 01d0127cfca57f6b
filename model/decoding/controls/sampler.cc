#include "model/decoding/controls/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace nmt {
namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

double sample_uniform(uint64_t seed, int hypothesis, int step) {
  // Each input passes a full finalizer before the next is mixed in, so that neighbouring
  // seeds, hypotheses and steps give unrelated numbers.
  uint64_t z = splitmix64(seed);
  z = splitmix64(z ^ uint64_t(uint32_t(hypothesis)));
  z = splitmix64(z ^ (uint64_t(uint32_t(step)) << 32));
  return double(z >> 11) * 0x1.0p-53;
}

double Sampler::warp(const float* logits, int vocab, const SampleMasks& masks, const SamplingParams& params,
                     double* lse) {
  tokens_.clear();
  weights_.clear();
  // Forced EOS (it wins, as transformers applies ForcedEOS last) or a forced first token: that
  // token has log-prob 0, every other -inf, and the warpers keep it alone.
  const int only = masks.force_eos ? masks.eos_id : masks.forced_token;
  if (masks.force_eos || masks.forced_token >= 0) {
    *lse = 0;
    tokens_.push_back(only);
    weights_.push_back(1);
    return 1;
  }
  // The masked logits: what the engines' log-softmax reads (candidates.h), in double.
  z_.resize(size_t(vocab));
  double max_x = kNegInf;
  for (int t = 0; t < vocab; ++t) {
    const bool masked = t == masks.pad_id || (masks.mask_eos && t == masks.eos_id);
    z_[size_t(t)] = masked ? kNegInf : double(logits[t]);
    max_x = std::max(max_x, z_[size_t(t)]);
  }
  double sum = 0;
  for (int t = 0; t < vocab; ++t) sum += std::exp(z_[size_t(t)] - max_x);
  *lse = max_x + std::log(sum);
  // TemperatureLogitsWarper: scores / temperature.
  if (params.temperature != 1.f) {
    for (double& v : z_) v /= double(params.temperature);
  }
  // TopKLogitsWarper: scores below the k-th largest are dropped (equal ones kept).
  double threshold = kNegInf;
  if (params.topk > 0 && params.topk < vocab) {
    weights_.assign(z_.begin(), z_.end());  // scratch for the k-th largest
    std::nth_element(weights_.begin(), weights_.begin() + (params.topk - 1), weights_.end(), std::greater<double>());
    threshold = weights_[size_t(params.topk - 1)];
    weights_.clear();
  }
  double max_z = kNegInf;
  for (int t = 0; t < vocab; ++t) {
    const double v = z_[size_t(t)];
    if (v == kNegInf || v < threshold) continue;  // probability 0 either way
    tokens_.push_back(t);
    max_z = std::max(max_z, v);
  }
  double total = 0;
  for (int t : tokens_) {
    weights_.push_back(std::exp(z_[size_t(t)] - max_z));
    total += weights_.back();
  }
  if (params.topp >= 1.f) return total;
  // TopPLogitsWarper: in descending order (ties: the lower id first), a token is dropped when
  // the probability of the tokens before it reaches top_p (its ascending cumulative sum is
  // then <= 1 - top_p); the likeliest always stays. The kept set is usually a few tokens: the
  // order is found by partial sorts of growing prefixes rather than one sort of the vocabulary.
  const size_t n = tokens_.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  auto before = [&](size_t a, size_t b) {
    return weights_[a] > weights_[b] || (weights_[a] == weights_[b] && tokens_[a] < tokens_[b]);
  };
  const double need = double(params.topp) * total;
  size_t keep = n;
  for (size_t sorted = std::min<size_t>(n, 64);; sorted = std::min(n, sorted * 4)) {
    std::partial_sort(order.begin(), order.begin() + long(sorted), order.end(), before);
    double mass = 0;
    size_t j = 0;
    for (; j < sorted && (j == 0 || mass < need); ++j) mass += weights_[order[j]];
    if (j < sorted || mass >= need || sorted == n) {
      keep = j;
      break;
    }
  }
  std::vector<int> kept_tokens(keep);
  std::vector<double> kept_weights(keep);
  total = 0;
  for (size_t j = 0; j < keep; ++j) {
    kept_tokens[j] = tokens_[order[j]];
    kept_weights[j] = weights_[order[j]];
    total += kept_weights[j];
  }
  tokens_.swap(kept_tokens);
  weights_.swap(kept_weights);
  return total;
}

Sample Sampler::draw(const float* logits, int vocab, const SampleMasks& masks, const SamplingParams& params,
                     double u) {
  double lse = 0;
  const double total = warp(logits, vocab, masks, params, &lse);
  // The inverse CDF at u over the kept tokens in warp()'s order; rounding cannot walk past the
  // last one.
  const double target = u * total;
  double acc = 0;
  size_t i = 0;
  for (; i + 1 < tokens_.size(); ++i) {
    acc += weights_[i];
    if (acc > target) break;
  }
  Sample s;
  s.token = tokens_[i];
  const bool one_hot = masks.force_eos || masks.forced_token >= 0;
  s.logprob = one_hot ? 0.f : float(double(logits[s.token]) - lse);
  return s;
}

std::vector<double> Sampler::distribution(const float* logits, int vocab, const SampleMasks& masks,
                                          const SamplingParams& params) {
  double lse = 0;
  const double total = warp(logits, vocab, masks, params, &lse);
  std::vector<double> p(size_t(vocab), 0.0);
  for (size_t i = 0; i < tokens_.size(); ++i) p[size_t(tokens_[i])] = weights_[i] / total;
  return p;
}

}  // namespace nmt
