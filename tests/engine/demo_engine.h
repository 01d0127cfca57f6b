#pragma once
// What the CUDA engine tests share: their skip where no device is visible (reported as
// SKIPPED with the reason, as CI reads it), and the embedded demo model on the CUDA engine.
#include <cstddef>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cuda_engine.h"
#include "model/decoding/engine.h"
#include "model/translator.h"
#include "tests/support/golden.h"

#define SKIP_WITHOUT_GPU()                                                                   \
  if (cuda_device_count() == 0)                                                              \
  GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not " \
                  "tested here"

namespace nmt::test {

// Source ids of test2016 sentences 0-3 (from the golden file), each ending in </s>.
inline const std::vector<std::vector<int>> kSources = {
    {5, 17, 4, 24, 168, 89, 6348, 39, 263, 2, 0},
    {5, 5942, 6184, 16, 174, 14, 6321, 114, 214, 4, 86, 19, 3, 45, 583, 2, 0},
    {5, 17, 2, 0},
    {26, 60, 10, 3, 112, 35, 91, 19, 3, 219, 8, 3, 1118, 2, 0},
};

struct Models {
  ModelConfig config;
  Weights weights;
};
inline const Models& models() {
  static const Models m = [] {
    Models r{ModelConfig::load(test::demo_model_dir()), {}};
    r.weights = Weights::load(test::demo_model_dir(), r.config);
    return r;
  }();
  return m;
}

inline std::unique_ptr<Engine> cuda_engine(Precision p, size_t limit = 0) {
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = p;
  o.device_memory_limit = limit;
  return make_cuda_engine(models().config, models().weights, o);
}

}  // namespace nmt::test
