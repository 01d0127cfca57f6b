// small_gemm_cuda (small_gemm.h) against a double-precision reference on the same rounded
// inputs: every row count up to kSmallGemmRows's bucket edges, column counts that leave a
// block's last warps idle, K of one and of many 16-byte packs per lane, padded leading
// dimensions (whose extra columns must stay unwritten), bias and each activation.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include <cmath>
#include <stdexcept>

#include "kernels/small_gemm.h"

namespace nmt::kernels::test {
namespace {

template <typename T>
using SmallGemmCuda = CudaKernelTest<T>;
TYPED_TEST_SUITE(SmallGemmCuda, KernelElementTypes);

double activated(double v, const Activation* act) {
  if (!act) return v;
  switch (*act) {
    case Activation::kRelu: return v > 0 ? v : 0;
    case Activation::kGelu: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case Activation::kSwish: return v / (1 + std::exp(-v));
  }
  return v;
}

struct Shape {
  int n, k;
  int x_pad, y_pad;  // extra elements per row of x and y
};

TYPED_TEST(SmallGemmCuda, MatchesReference) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  const Shape shapes[] = {{1, kVec, 0, 0}, {37, 64, kVec, 3}, {256, 256, 0, 0}, {301, 1032, 2 * kVec, 1}, {64, 2048, 0, 0}};
  const Activation swish = Activation::kSwish, gelu = Activation::kGelu, relu = Activation::kRelu;
  const Activation* acts[] = {nullptr, &swish, &gelu, &relu};
  uint32_t seed = 11;
  int variant = 0;
  for (const Shape& s : shapes) {
    for (int rows : {1, 2, 3, 4, 5, 8, 13, 16}) {
      const Activation* act = acts[variant % 4];
      const bool with_bias = variant++ % 3 != 0;
      const int64_t ldx = s.k + s.x_pad, ldy = s.n + s.y_pad;
      auto x = random_vector(size_t(rows * ldx), -1.f, 1.f, seed++);
      auto w = random_vector(size_t(s.n) * s.k, -0.5f, 0.5f, seed++);
      auto bias = random_vector(size_t(s.n), -1.f, 1.f, seed++);
      round_to<T>(x);
      round_to<T>(w);
      round_to<T>(bias);
      std::vector<float> ref(size_t(rows) * s.n);
      for (int m = 0; m < rows; ++m) {
        for (int n = 0; n < s.n; ++n) {
          double sum = with_bias ? bias[size_t(n)] : 0.0;
          for (int k = 0; k < s.k; ++k) sum += double(x[size_t(m * ldx + k)]) * w[size_t(n) * s.k + k];
          ref[size_t(m) * s.n + n] = float(activated(sum, act));
        }
      }
      DeviceBuffer<T> dx(x), dw(w), db(bias), dy(size_t(rows * ldy));
      small_gemm_cuda<T>(dx.get(), ldx, dw.get(), with_bias ? db.get() : nullptr, dy.get(), ldy, rows,
                         s.n, s.k, act, nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<float> y = dy.download();
      std::vector<float> got(ref.size());
      int written_padding = 0;
      for (int m = 0; m < rows; ++m) {
        for (int n = 0; n < ldy; ++n) {
          const float v = y[size_t(m * ldy + n)];
          if (n < s.n) got[size_t(m) * s.n + n] = v;
          else written_padding += !std::isnan(v);
        }
      }
      const std::string what = std::string(type_name<T>()) + " rows=" + std::to_string(rows) +
                               " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                               (with_bias ? " bias" : "") + (act ? " act" : "");
      NMT_EXPECT_CLOSE(got, ref, tolerance<T>(), what);
      EXPECT_EQ(written_padding, 0) << what;
    }
  }
}

TYPED_TEST(SmallGemmCuda, RejectsWhatItCannotTake) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  DeviceBuffer<T> x(size_t(32 * 64)), w(size_t(64 * 64)), y(size_t(32 * 64));
  EXPECT_TRUE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, kSmallGemmRows, 64));
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, kSmallGemmRows + 1, 64));
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, 0, 64));
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, 4, 64 - 1));       // K
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64 + 1, w.get(), nullptr, 64, 4, 64));       // ldx
  EXPECT_FALSE(small_gemm_supported<T>(x.get() + 1, 64, w.get(), nullptr, 64, 4, 64));       // x alignment
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get() + 1, nullptr, 64, 4, 64 - kVec));  // w alignment
  EXPECT_THROW(small_gemm_cuda<T>(x.get(), 64, w.get(), nullptr, y.get(), 64, kSmallGemmRows + 1, 64, 64,
                                  nullptr, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(SmallGemmCuda)
#endif
