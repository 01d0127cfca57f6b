#pragma once
// What the sampling tests compare the sampler's draws with: transformers' warpers written
// out as its Python does them (TemperatureLogitsWarper, TopKLogitsWarper with torch.topk's
// k-th value, TopPLogitsWarper's ascending sort and cumulative sum), independently of
// model/decoding/controls/sampler.cc's order and shortcuts, and a chi-square goodness-of-fit test.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "model/decoding/controls/sampler.h"

namespace nmt::test {

// softmax(warpers(masked logits)), per token.
inline std::vector<double> warped_softmax(const std::vector<float>& logits, const SampleMasks& m,
                                          const SamplingParams& p) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const size_t v = logits.size();
  std::vector<double> z(v);
  for (size_t t = 0; t < v; ++t) z[t] = double(logits[t]);
  const int only = m.force_eos ? m.eos_id : m.forced_token;
  if (only >= 0) {
    std::fill(z.begin(), z.end(), neg_inf);
    z[size_t(only)] = 0;
  } else {
    if (m.pad_id >= 0) z[size_t(m.pad_id)] = neg_inf;
    if (m.mask_eos && m.eos_id >= 0) z[size_t(m.eos_id)] = neg_inf;
  }
  for (double& x : z) x /= double(p.temperature);
  if (p.topk > 0) {
    std::vector<double> sorted = z;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    const double kth = sorted[std::min(size_t(p.topk), v) - 1];
    for (double& x : z) x = x < kth ? neg_inf : x;
  }
  auto softmax = [&](const std::vector<double>& s) {
    const double mx = *std::max_element(s.begin(), s.end());
    std::vector<double> e(s.size());
    double sum = 0;
    for (size_t t = 0; t < s.size(); ++t) sum += e[t] = std::exp(s[t] - mx);
    for (double& x : e) x /= sum;
    return e;
  };
  if (p.topp < 1.f) {
    // Ascending, ties: the higher id first (so that descending, the lower id comes first).
    std::vector<size_t> asc(v);
    std::iota(asc.begin(), asc.end(), 0);
    std::stable_sort(asc.begin(), asc.end(), [&](size_t a, size_t b) { return z[a] < z[b] || (z[a] == z[b] && a > b); });
    const std::vector<double> probs = softmax(z);
    double cumulative = 0;
    std::vector<char> drop(v, 0);
    for (size_t i = 0; i < v; ++i) {
      cumulative += probs[asc[i]];
      drop[asc[i]] = i + 1 < v && cumulative <= 1.0 - double(p.topp);  // the last (likeliest) stays
    }
    for (size_t t = 0; t < v; ++t) z[t] = drop[t] ? neg_inf : z[t];
  }
  return softmax(z);
}

// The tokens of nonzero probability.
inline std::vector<int> warped_support(const std::vector<double>& p) {
  std::vector<int> s;
  for (size_t t = 0; t < p.size(); ++t) {
    if (p[t] > 0) s.push_back(int(t));
  }
  return s;
}

struct ChiSquare {
  double statistic = 0;
  int bins = 0;     // tokens expected at least 5 times each, and one bin for the rest (if any)
  int outside = 0;  // draws of tokens of probability 0
};

inline ChiSquare chi_square(const std::vector<int>& counts, const std::vector<double>& expected, int n) {
  ChiSquare c;
  double rest_expected = 0, rest_observed = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    const double e = expected[t] * n;
    if (expected[t] == 0) {
      c.outside += counts[t];
    } else if (e >= 5) {
      c.statistic += (counts[t] - e) * (counts[t] - e) / e;
      ++c.bins;
    } else {
      rest_expected += e;
      rest_observed += counts[t];
    }
  }
  if (rest_expected > 0) {
    c.statistic += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
    ++c.bins;
  }
  return c;
}

// The chi-square value a correct sampler exceeds with probability 1e-4 at `df` degrees of
// freedom (Wilson-Hilferty's approximation, within a percent from df 3 on): the tests use
// fixed seeds, so each is deterministic, and a wrong distribution is far beyond it.
inline double chi_square_critical(int df) {
  const double z = 3.719;  // the standard normal's 1 - 1e-4 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

}  // namespace nmt::test
