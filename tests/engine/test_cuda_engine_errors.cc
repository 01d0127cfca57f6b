// The CUDA engine's refusals on the embedded demo model: bad requests are kInvalidArgument,
// inputs the decode loop never gives kInternal, and the engine goes on afterwards; a device
// index beyond the visible ones is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/cuda_engine.h"
#include "model/error.h"
#include "tests/engine/demo_engine.h"

using namespace nmt;
using nmt::test::cuda_engine;
using nmt::test::kSources;
using nmt::test::models;

TEST(CudaEngine, RejectsBadInputs) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda_engine(Precision::kFloat16);
  gpu->reserve({2, 2, 16});
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    ADD_FAILURE() << "no nmt::Error thrown";
    return ErrorCode::kUnavailable;
  };
  const std::vector<int> too_long(17, 5), empty, bad_id{models().config.vocab_size, 0};
  EXPECT_EQ(code([&] { gpu->encode({{&too_long, 0}}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { gpu->encode({{&empty, 0}}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { gpu->encode({{&bad_id, 0}}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { gpu->encode({{&kSources[2], 2}}); }), ErrorCode::kInternal);
  EXPECT_EQ(code([&] { gpu->encode({{&kSources[2], 1}, {&kSources[0], 1}}); }),
            ErrorCode::kInternal);

  gpu->encode({{&kSources[2], 1}});
  auto one_row = [&](int position, int cache_row) {
    StepInput in;
    StepGroup g;
    g.slot = 1;
    g.position = position;
    in.groups.push_back(g);
    in.tokens = {models().config.decoder_start_id};
    in.cache_rows = {cache_row};
    in.parent_rows = {cache_row};
    in.running_scores = {0.f};
    return in;
  };
  StepOutput out;
  EXPECT_EQ(code([&] { gpu->step(one_row(models().config.max_positions, 0), &out); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code([&] { gpu->step(one_row(0, 2), &out); }), ErrorCode::kInternal);
  StepInput two = one_row(0, 0);
  two.cache_rows.push_back(1);
  EXPECT_EQ(code([&] { gpu->step(two, &out); }), ErrorCode::kInternal);  // 2 rows, beam 1
  gpu->step(one_row(0, 1), &out);
  ASSERT_EQ(out.scores.size(), 1u);
  EXPECT_TRUE(std::isfinite(out.scores[0]));
}

TEST(CudaEngine, DeviceCountAndBadIndex) {
  SKIP_WITHOUT_GPU();
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.device_index = cuda_device_count();
  EXPECT_THROW(make_cuda_engine(models().config, models().weights, o), Error);
}
