#pragma once
// The CUDA engine tests' skip where no device is visible (test_cuda_engine.cc,
// test_cuda_engine_families.cc): reported as SKIPPED with the reason, as CI reads it.
#include <gtest/gtest.h>

#include "model/cuda_engine.h"

#define SKIP_WITHOUT_GPU()                                                                   \
  if (cuda_device_count() == 0)                                                              \
  GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not " \
                  "tested here"
