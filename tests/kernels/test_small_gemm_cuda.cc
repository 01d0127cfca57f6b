// small_gemm_cuda (small_gemm.h) against a double-precision reference on the same rounded
// inputs: every row count up to the float kernel's bucket edges and across the 16-bit
// kernel's row groups up to its 32 rows, column counts that leave a block's last warps idle, K
// of one and of many 16-byte packs per lane, padded leading dimensions (whose extra columns
// must stay unwritten), bias and each activation; with a SmallGemmNorm, the LayerNorm prologue
// against layer_norm_cpu on the same inputs.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/layer_norm.h"
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
  // 3100 x 1024 (NLLB's shapes): more blocks of 8 columns than one wave, so 16-bit types take
  // blocks of more column tiles, the last one cut short. K 4096 (NLLB's fc2): past K 2048 a warp
  // of the 16-warp kernel loads all 8 of its chunks before the wait.
  const Shape shapes[] = {{1, kVec, 0, 0},          {37, 64, kVec, 3}, {256, 256, 0, 0},
                          {301, 1032, 2 * kVec, 1}, {64, 2048, 0, 0},  {3100, 1024, 0, 1},
                          {40, 4096, kVec, 1}};
  const Activation swish = Activation::kSwish, gelu = Activation::kGelu, relu = Activation::kRelu;
  const Activation* acts[] = {nullptr, &swish, &gelu, &relu};
  uint32_t seed = 11;
  int variant = 0;
  for (const Shape& s : shapes) {
    for (int rows : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 25, 32}) {
      if (rows > small_gemm_max_rows<T>()) continue;
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

// y = LN(x + residual + bias) W^T + b with the LayerNorm in the prologue; norm.out holds the
// normalized rows (padding of x's leading dimension unwritten), every block reads the same
// inputs. Shapes: K from part of one pack a lane to kSmallGemmNormPacks packs a lane.
TYPED_TEST(SmallGemmCuda, NormalizedInputMatchesReference) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  // 4100 columns of the longest K: NLLB's fc1 (4096 x 1024 in 16-bit types), over one wave of
  // blocks of 8 columns; 40 of it: one wave of single tiles (in 8 warps up to 8 rows).
  const Shape shapes[] = {{37, 32 * kVec, 0, 0},  {512, 512, kVec, 0},    {1536, 256, 0, 2},
                          {64, 24 * kVec, 0, 0},  {300, 96 * kVec, 0, 0}, {40, kSmallGemmNormPacks * 32 * kVec, 0, 0},
                          {4100, kSmallGemmNormPacks * 32 * kVec, 0, 3}};
  const Activation relu = Activation::kRelu;
  uint32_t seed = 101;
  int variant = 0;
  for (const Shape& s : shapes) {
    for (int rows : {1, 3, 4, 6, 8, 11, 16, 20, 32}) {
      // Past the shared memory of the normalized rows: NormRejectsWhatItCannotTake.
      if (rows > small_gemm_max_rows<T>() || size_t(rows) * size_t(s.k) * sizeof(T) > kSmallGemmNormBytes) continue;
      const int64_t ldx = s.k + s.x_pad, ldy = s.n + s.y_pad;
      const bool with_residual = variant % 2 == 0, with_bias = variant % 3 != 0;
      // What `out` receives: LN(z) (post-norm), z itself (store_sum: pre-norm), or nothing.
      enum class Out { kNormalized, kSum, kNone };
      const Out out_mode = variant % 5 == 1 ? Out::kSum : variant % 5 == 3 ? Out::kNone : Out::kNormalized;
      const Activation* act = variant++ % 4 == 1 ? &relu : nullptr;
      auto x = random_vector(size_t(rows * ldx), -1.f, 1.f, seed++);
      auto res = random_vector(size_t(rows * ldx), -2.f, 3.f, seed++);  // a row mean away from 0
      auto nb = random_vector(size_t(s.k), -0.5f, 0.5f, seed++);
      auto gamma = random_vector(size_t(s.k), 0.5f, 1.5f, seed++);
      auto beta = random_vector(size_t(s.k), -0.5f, 0.5f, seed++);
      auto w = random_vector(size_t(s.n) * s.k, -0.5f, 0.5f, seed++);
      auto bias = random_vector(size_t(s.n), -1.f, 1.f, seed++);
      for (auto* v : {&x, &res, &nb, &gamma, &beta, &w, &bias}) round_to<T>(*v);
      // The normalized rows, rounded to T as the kernel keeps them, then the projection.
      std::vector<float> z(size_t(rows) * s.k), zres(z.size()), normed(z.size());
      for (int m = 0; m < rows; ++m)
        for (int k = 0; k < s.k; ++k) {
          z[size_t(m) * s.k + k] = x[size_t(m * ldx + k)];
          zres[size_t(m) * s.k + k] = res[size_t(m * ldx + k)];
        }
      layer_norm_cpu(z.data(), with_residual ? zres.data() : nullptr, with_bias ? nb.data() : nullptr,
                     gamma.data(), beta.data(), normed.data(), rows, s.k, 1e-5f);
      round_to<T>(normed);
      std::vector<float> sum(z.size());
      for (size_t i = 0; i < z.size(); ++i)
        sum[i] = z[i] + (with_residual ? zres[i] : 0.f) + (with_bias ? nb[i % size_t(s.k)] : 0.f);
      round_to<T>(sum);
      std::vector<float> ref(size_t(rows) * s.n);
      for (int m = 0; m < rows; ++m)
        for (int n = 0; n < s.n; ++n) {
          double sum = bias[size_t(n)];
          for (int k = 0; k < s.k; ++k) sum += double(normed[size_t(m) * s.k + k]) * w[size_t(n) * s.k + k];
          ref[size_t(m) * s.n + n] = float(activated(sum, act));
        }
      DeviceBuffer<T> dx(x), dres(res), dnb(nb), dg(gamma), dbeta(beta), dw(w), db(bias),
          dout(size_t(rows * ldx)), dy(size_t(rows * ldy));
      SmallGemmNorm<T> norm;
      norm.residual = with_residual ? dres.get() : nullptr;
      norm.bias = with_bias ? dnb.get() : nullptr;
      norm.gamma = dg.get();
      norm.beta = dbeta.get();
      norm.out = out_mode == Out::kNone ? nullptr : dout.get();
      norm.store_sum = out_mode != Out::kNormalized;
      ASSERT_TRUE(small_gemm_supported<T>(dx.get(), ldx, dw.get(), db.get(), ldy, rows, s.k, &norm));
      small_gemm_cuda<T>(dx.get(), ldx, dw.get(), db.get(), dy.get(), ldy, rows, s.n, s.k, act, nullptr, &norm);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<float> y = dy.download(), out = dout.download();
      std::vector<float> got(ref.size()), got_normed(normed.size());
      int written_padding = 0;
      for (int m = 0; m < rows; ++m) {
        for (int n = 0; n < ldy; ++n) {
          if (n < s.n) got[size_t(m) * s.n + n] = y[size_t(m * ldy + n)];
          else written_padding += !std::isnan(y[size_t(m * ldy + n)]);
        }
        for (int k = 0; k < ldx; ++k) {
          if (k < s.k && out_mode != Out::kNone) got_normed[size_t(m) * s.k + k] = out[size_t(m * ldx + k)];
          else written_padding += !std::isnan(out[size_t(m * ldx + k)]);
        }
      }
      const std::string what = std::string(type_name<T>()) + " rows=" + std::to_string(rows) +
                               " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                               (with_residual ? " residual" : "") + (with_bias ? " bias" : "") +
                               (act ? " act" : "") +
                               (out_mode == Out::kSum ? " store_sum" : out_mode == Out::kNone ? " no out" : "");
      if (out_mode == Out::kNormalized) NMT_EXPECT_CLOSE(got_normed, normed, tolerance<T>(), what + " normalized rows");
      if (out_mode == Out::kSum) NMT_EXPECT_CLOSE(got_normed, sum, tolerance<T>(), what + " stored sums");
      NMT_EXPECT_CLOSE(got, ref, tolerance<T>(), what);
      EXPECT_EQ(written_padding, 0) << what;
    }
  }
}

TYPED_TEST(SmallGemmCuda, NormRejectsWhatItCannotTake) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  const int k = 512;
  const size_t cols = size_t(k), rows_cols = 32 * cols;
  DeviceBuffer<T> x(rows_cols), w(cols * cols), g(cols), b(cols), out(rows_cols), y(rows_cols);
  SmallGemmNorm<T> norm;
  norm.gamma = g.get();
  norm.beta = b.get();
  norm.out = out.get();
  EXPECT_TRUE(small_gemm_supported<T>(x.get(), k, w.get(), nullptr, k, small_gemm_max_rows<T>(), k, &norm));
  // K of kSmallGemmNormPacks packs a lane fits; a pack more does not, at any row count.
  const int most = kSmallGemmNormPacks * 32 * kVec;
  const size_t wide_cols = size_t(most + kVec);
  DeviceBuffer<T> wide(32 * wide_cols), wide_out(32 * wide_cols), wide_g(wide_cols);
  SmallGemmNorm<T> wide_norm = norm;
  wide_norm.gamma = wide_norm.beta = wide_g.get();
  wide_norm.out = wide_out.get();
  // The normalized rows fit in kSmallGemmNormBytes of shared memory: 16 rows of the longest K
  // in 16-bit types (8 in float), no more.
  const int most_rows = std::min(small_gemm_max_rows<T>(), int(kSmallGemmNormBytes / (size_t(most) * sizeof(T))));
  EXPECT_TRUE(small_gemm_supported<T>(wide.get(), most, w.get(), nullptr, 8, most_rows, most, &wide_norm));
  EXPECT_FALSE(small_gemm_supported<T>(wide.get(), most + kVec, w.get(), nullptr, 8, most_rows, most + kVec, &wide_norm));
  if (most_rows < small_gemm_max_rows<T>()) {
    EXPECT_FALSE(small_gemm_supported<T>(wide.get(), most, w.get(), nullptr, 8, most_rows + 1, most, &wide_norm));
    EXPECT_TRUE(small_gemm_supported<T>(wide.get(), most, w.get(), nullptr, 8, most_rows + 1, most));  // unnormalized
  }
  EXPECT_FALSE(small_gemm_supported<T>(wide.get(), most + kVec, w.get(), nullptr, 8, 1, most + kVec, &wide_norm));
  EXPECT_TRUE(small_gemm_supported<T>(wide.get(), most + kVec, w.get(), nullptr, 8, 1, most + kVec));  // unnormalized
  SmallGemmNorm<T> bad = norm;
  bad.out = out.get() + 1;  // misaligned
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), k, w.get(), nullptr, k, 4, k, &bad));
  bad = norm;
  bad.gamma = nullptr;
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), k, w.get(), nullptr, k, 4, k, &bad));
  bad = norm;
  bad.out = x.get();  // other blocks still read x
  EXPECT_THROW(small_gemm_cuda<T>(x.get(), k, w.get(), nullptr, y.get(), k, 4, k, k, nullptr, nullptr, &bad),
               std::invalid_argument);
  bad.residual = out.get();
  bad.out = out.get();
  EXPECT_THROW(small_gemm_cuda<T>(x.get(), k, w.get(), nullptr, y.get(), k, 4, k, k, nullptr, nullptr, &bad),
               std::invalid_argument);
}

// The output projection's wide kernel: float32 logits of 1 to 4 rows over many columns (more
// groups of 8 than a GPU's warps, fewer; a last group cut short), K of one pack a lane,
// several, and a part of one, with and without the LayerNorm prologue; the padding of y's rows
// stays unwritten.
TYPED_TEST(SmallGemmCuda, LogitsMatchReference) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  // K: 512 (Transformer-base), one pack a lane, three of kSmallGemmLogitsPacks, a part of one.
  // Column counts: more groups than warps of a full GPU (each warp loops, prefetching), fewer.
  // 60001 x 1024: NLLB's K (four packs a lane, no prefetch of the next group).
  const Shape shapes[] = {{40001, 512, 0, 5},  {64, 32 * kVec, kVec, 0}, {1000, 96 * kVec, 0, 8},
                          {100, 3 * kVec, 0, 0}, {60001, 128 * kVec, 0, 2}};
  uint32_t seed = 301;
  int variant = 0;
  for (const Shape& s : shapes) {
    for (int rows = 1; rows <= kSmallGemmLogitsRows; ++rows) {
      const bool with_norm = variant++ % 2 == 0;
      const int64_t ldx = s.k + s.x_pad, ldy = s.n + s.y_pad;
      auto x = random_vector(size_t(rows * ldx), -1.f, 1.f, seed++);
      auto res = random_vector(size_t(rows * ldx), -2.f, 3.f, seed++);
      auto gamma = random_vector(size_t(s.k), 0.5f, 1.5f, seed++);
      auto beta = random_vector(size_t(s.k), -0.5f, 0.5f, seed++);
      auto w = random_vector(size_t(s.n) * s.k, -0.5f, 0.5f, seed++);
      for (auto* v : {&x, &res, &gamma, &beta, &w}) round_to<T>(*v);
      std::vector<float> in(size_t(rows) * s.k), zres(in.size());
      for (int m = 0; m < rows; ++m)
        for (int k = 0; k < s.k; ++k) {
          in[size_t(m) * s.k + k] = x[size_t(m * ldx + k)];
          zres[size_t(m) * s.k + k] = res[size_t(m * ldx + k)];
        }
      if (with_norm) {
        std::vector<float> normed(in.size());
        layer_norm_cpu(in.data(), zres.data(), nullptr, gamma.data(), beta.data(), normed.data(), rows,
                       s.k, 1e-5f);
        round_to<T>(normed);
        in = normed;
      }
      std::vector<float> ref(size_t(rows) * s.n);
      for (int m = 0; m < rows; ++m)
        for (int n = 0; n < s.n; ++n) {
          double sum = 0;
          for (int k = 0; k < s.k; ++k) sum += double(in[size_t(m) * s.k + k]) * w[size_t(n) * s.k + k];
          ref[size_t(m) * s.n + n] = float(sum);
        }
      DeviceBuffer<T> dx(x), dres(res), dg(gamma), dbeta(beta), dw(w), dout(size_t(rows * ldx));
      DeviceBuffer<float> dy(size_t(rows * ldy));
      SmallGemmNorm<T> norm;
      norm.residual = dres.get();
      norm.gamma = dg.get();
      norm.beta = dbeta.get();
      norm.out = dout.get();
      ASSERT_TRUE(small_gemm_logits_supported<T>(dx.get(), ldx, dw.get(), ldy, rows, s.k, with_norm ? &norm : nullptr));
      small_gemm_logits_cuda<T>(dx.get(), ldx, dw.get(), dy.get(), ldy, rows, s.n, s.k, nullptr,
                                with_norm ? &norm : nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      const std::vector<float> y = dy.download();
      std::vector<float> got(ref.size());
      int written_padding = 0;
      for (int m = 0; m < rows; ++m)
        for (int n = 0; n < ldy; ++n) {
          if (n < s.n) got[size_t(m) * s.n + n] = y[size_t(m * ldy + n)];
          else written_padding += !std::isnan(y[size_t(m * ldy + n)]);
        }
      const std::string what = std::string(type_name<T>()) + " logits rows=" + std::to_string(rows) +
                               " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                               (with_norm ? " norm" : "");
      // Unnormalized, the inputs are exactly the reference's: only float32 sums differ. The
      // normalized rows are rounded to T by both, where one rounding may land on either side.
      NMT_EXPECT_CLOSE(got, ref, with_norm ? tolerance<T>() : 1e-4f, what);
      EXPECT_EQ(written_padding, 0) << what;
      if (with_norm) {
        std::vector<float> normed_got(in.size());
        const std::vector<float> out = dout.download();
        for (int m = 0; m < rows; ++m)
          for (int k = 0; k < s.k; ++k) normed_got[size_t(m) * s.k + k] = out[size_t(m * ldx + k)];
        NMT_EXPECT_CLOSE(normed_got, in, tolerance<T>(), what + " normalized rows");
      }
    }
  }
}

TYPED_TEST(SmallGemmCuda, LogitsRejectWhatTheyCannotTake) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  const int most = kSmallGemmLogitsPacks * 32 * kVec, n = 64;
  DeviceBuffer<T> x(size_t(8 * (most + kVec))), w(size_t(n) * (most + kVec));
  DeviceBuffer<float> y(size_t(8 * n));
  EXPECT_TRUE(small_gemm_logits_supported<T>(x.get(), most, w.get(), n, kSmallGemmLogitsRows, most));
  EXPECT_FALSE(small_gemm_logits_supported<T>(x.get(), most + kVec, w.get(), n, 1, most + kVec));  // K
  EXPECT_FALSE(small_gemm_logits_supported<T>(x.get(), most, w.get(), n, kSmallGemmLogitsRows + 1, most));
  EXPECT_THROW(small_gemm_logits_cuda<T>(x.get(), most + kVec, w.get(), y.get(), n, 1, n, most + kVec, nullptr),
               std::invalid_argument);
}

TYPED_TEST(SmallGemmCuda, RejectsWhatItCannotTake) {
  using T = TypeParam;
  constexpr int kVec = 16 / int(sizeof(T));
  DeviceBuffer<T> x(size_t(32 * 64)), w(size_t(64 * 64)), y(size_t(32 * 64));
  EXPECT_TRUE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, small_gemm_max_rows<T>(), 64));
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, small_gemm_max_rows<T>() + 1, 64));
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, 0, 64));
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get(), nullptr, 64, 4, 64 - 1));       // K
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64 + 1, w.get(), nullptr, 64, 4, 64));       // ldx
  EXPECT_FALSE(small_gemm_supported<T>(x.get() + 1, 64, w.get(), nullptr, 64, 4, 64));       // x alignment
  EXPECT_FALSE(small_gemm_supported<T>(x.get(), 64, w.get() + 1, nullptr, 64, 4, 64 - kVec));  // w alignment
  EXPECT_THROW(small_gemm_cuda<T>(x.get(), 64, w.get(), nullptr, y.get(), 64, small_gemm_max_rows<T>() + 1, 64, 64,
                                  nullptr, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(SmallGemmCuda)
#endif
