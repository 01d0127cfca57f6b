// layer_norm_cuda against layer_norm_cpu for every dispatch branch and element type.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include "kernels/layer_norm.h"

namespace nmt::kernels::test {
namespace {

// Widths cover: sub-warp groups with two rows per group (<= 32 packs), one warp with the row in
// registers (<= 1024, odd and prime ones take the 1-element pack with padding), a block with the
// row cached in shared memory (float up to ~58k columns, 16-bit T up to ~116k when the row is
// x itself), and a block re-reading global memory (60013 in float, 120011 in every type).
const int kWidths[] = {1,   2,    3,    5,    7,    8,    13,   16,   31,    32,    33,   64,
                       97,  127,  128,  255,  256,  509,  512,  768,  1000,  1021,  1024, 1025,
                       1536, 2048, 3001, 4096, 8191, 12288, 16384, 32749, 32768, 60013,
                       120011};

template <typename T>
class LayerNormCuda : public ::testing::Test {
 protected:
  void SetUp() override { NMT_SKIP_WITHOUT_GPU(); }
};
using Types = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(LayerNormCuda, Types);

template <typename T>
void check_width(int64_t cols, bool fused, uint32_t seed) {
  const int64_t rows = cols <= 64 ? 67 : cols <= 4096 ? 23 : 5;  // odd: a lone last row
  const size_t n = size_t(rows * cols);
  auto x = random_vector(n, -2.f, 2.f, seed);
  auto res = random_vector(n, -1.f, 1.f, seed + 1);
  auto bias = random_vector(size_t(cols), -0.5f, 0.5f, seed + 2);
  auto gamma = random_vector(size_t(cols), 0.5f, 1.5f, seed + 3);
  auto beta = random_vector(size_t(cols), -0.5f, 0.5f, seed + 4);
  for (auto* v : {&x, &res, &bias, &gamma, &beta}) round_to<T>(*v);
  // a constant offset per row makes the mean matter (catches a wrong mean subtraction)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = to_f(to_t<T>(x[r * cols + c] + 0.25f * r));

  std::vector<float> ref(n), ref_mean(rows), ref_inv(rows);
  layer_norm_cpu(x.data(), fused ? res.data() : nullptr, fused ? bias.data() : nullptr,
                 gamma.data(), beta.data(), ref.data(), rows, cols, 1e-5f, ref_mean.data(),
                 ref_inv.data());

  DeviceBuffer<T> dx(x), dres(res), dbias(bias), dgamma(gamma), dbeta(beta), dy(n);
  DeviceBuffer<float> dmean(rows), dinv(rows);
  layer_norm_cuda<T>(dx.get(), fused ? dres.get() : nullptr, fused ? dbias.get() : nullptr,
                     dgamma.get(), dbeta.get(), dy.get(), rows, cols, 1e-5f, nullptr,
                     dmean.get(), dinv.get());
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  const std::string what = std::string(type_name<T>()) + " cols=" + std::to_string(cols) +
                           (fused ? " (residual+bias)" : "");
  NMT_EXPECT_CLOSE(dy.download(), ref, tolerance<T>(), what);
  NMT_EXPECT_CLOSE(dmean.download(), ref_mean, 1e-5f, what + " mean");
  NMT_EXPECT_CLOSE(dinv.download(), ref_inv, 1e-5f, what + " inv_std");
}

TYPED_TEST(LayerNormCuda, AllWidthsResidualBias) {
  uint32_t seed = 100;
  for (int cols : kWidths) check_width<TypeParam>(cols, true, seed += 10);
}

TYPED_TEST(LayerNormCuda, AllWidthsPlain) {
  uint32_t seed = 900;
  for (int cols : kWidths) check_width<TypeParam>(cols, false, seed += 10);
}

TEST(LayerNormCudaMisc, NoAffineNoStatsOnStream) {
  NMT_SKIP_WITHOUT_GPU();
  const int64_t rows = 9, cols = 300;
  auto x = random_vector(size_t(rows * cols), -3.f, 3.f, 7);
  std::vector<float> ref(x.size());
  layer_norm_cpu(x.data(), nullptr, nullptr, nullptr, nullptr, ref.data(), rows, cols, 1e-5f);
  cudaStream_t stream;
  NMT_CHECK_CUDA(cudaStreamCreate(&stream));
  DeviceBuffer<float> dx(x), dy(x.size());
  layer_norm_cuda<float>(dx.get(), nullptr, nullptr, nullptr, nullptr, dy.get(), rows, cols,
                         1e-5f, stream);
  NMT_CHECK_CUDA(cudaStreamSynchronize(stream));
  NMT_CHECK_CUDA(cudaStreamDestroy(stream));
  NMT_EXPECT_CLOSE(dy.download(), ref, 1e-5f, "float cols=300 no affine");
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(LayerNormCuda)
#endif
