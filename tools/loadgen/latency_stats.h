#pragma once
// Latency percentiles of a load run (nearest-rank: the smallest sample with at least p% of
// the samples at or below it).
#include <cstddef>
#include <vector>

namespace nmt::loadgen {

struct LatencySummary {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // same unit as the samples
};

double percentile(const std::vector<double>& sorted, double p);  // p in [0, 100]
LatencySummary summarize(std::vector<double> samples);

}  // namespace nmt::loadgen
