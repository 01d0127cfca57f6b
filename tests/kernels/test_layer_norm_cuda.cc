// layer_norm_cuda against layer_norm_cpu for every dispatch branch and element type.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include "kernels/layer_norm.h"

namespace nmt::kernels::test {
namespace {

// kRowwiseWidths: every dispatch branch (16-bit rows cached up to ~116k when the row is x
// itself).

template <typename T>
using LayerNormCuda = CudaKernelTest<T>;
TYPED_TEST_SUITE(LayerNormCuda, KernelElementTypes);

template <typename T>
// with_sum: z = x + residual + bias also stored (a pre-norm residual stream).
void check_width(int64_t cols, bool fused, uint32_t seed, bool with_sum = false) {
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

  std::vector<float> ref_sum(n);
  for (size_t i = 0; i < n; ++i) ref_sum[i] = x[i] + (fused ? res[i] + bias[i % size_t(cols)] : 0.f);
  round_to<T>(ref_sum);

  DeviceBuffer<T> dx(x), dres(res), dbias(bias), dgamma(gamma), dbeta(beta), dy(n), dsum(n);
  DeviceBuffer<float> dmean(rows), dinv(rows);
  layer_norm_cuda<T>(dx.get(), fused ? dres.get() : nullptr, fused ? dbias.get() : nullptr,
                     dgamma.get(), dbeta.get(), dy.get(), rows, cols, 1e-5f, nullptr,
                     dmean.get(), dinv.get(), with_sum ? dsum.get() : nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  const std::string what = std::string(type_name<T>()) + " cols=" + std::to_string(cols) +
                           (fused ? " (residual+bias)" : "") + (with_sum ? " storing the sum" : "");
  if (with_sum) NMT_EXPECT_CLOSE(dsum.download(), ref_sum, tolerance<T>(), what + " sum");
  NMT_EXPECT_CLOSE(dy.download(), ref, tolerance<T>(), what);
  NMT_EXPECT_CLOSE(dmean.download(), ref_mean, 1e-5f, what + " mean");
  NMT_EXPECT_CLOSE(dinv.download(), ref_inv, 1e-5f, what + " inv_std");
}

TYPED_TEST(LayerNormCuda, AllWidthsResidualBias) {
  uint32_t seed = 100;
  for (int cols : kRowwiseWidths) check_width<TypeParam>(cols, true, seed += 10);
}

TYPED_TEST(LayerNormCuda, AllWidthsPlain) {
  uint32_t seed = 900;
  for (int cols : kRowwiseWidths) check_width<TypeParam>(cols, false, seed += 10);
}

TYPED_TEST(LayerNormCuda, AllWidthsStoringTheSum) {
  uint32_t seed = 1700;
  for (int cols : kRowwiseWidths) check_width<TypeParam>(cols, true, seed += 10, true);
}

TEST(LayerNormCudaMisc, SumMustNotAliasTheInputs) {
  NMT_SKIP_WITHOUT_GPU();
  DeviceBuffer<float> x(64), r(64), y(64);
  EXPECT_THROW(layer_norm_cuda<float>(x.get(), r.get(), nullptr, nullptr, nullptr, y.get(), 1, 64, 1e-5f, nullptr,
                                      nullptr, nullptr, x.get()),
               std::invalid_argument);
  EXPECT_THROW(layer_norm_cuda<float>(x.get(), r.get(), nullptr, nullptr, nullptr, y.get(), 1, 64, 1e-5f, nullptr,
                                      nullptr, nullptr, r.get()),
               std::invalid_argument);
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
