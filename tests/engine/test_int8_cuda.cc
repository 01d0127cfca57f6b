// precision int8 on the CUDA engine (kernels/quantize.h): the int8 GEMV, the dequantization, the
// activations' quantizer and the int32 products' rescaling against their CPU reference (every
// row tile, the LayerNorm prologue, float16 and float32 outputs), cuBLASLt's FP8 GEMM with its
// epilogue against the same sums from the e4m3 bytes, and the demo model's test2016
// in int8 against float16: >= 90% of sentences token-identical and BLEU within 0.5, at batch 1
// (4 rows a step: the int8 GEMV's 8-row tile), batch 8 (32 rows: its 16-row tiles) and batch 64
// (256 rows: the dequantization, or cuBLAS's int8 GEMM under NMT_CUDA_INT8_GEMM=tensor-cores);
// fp8 the same.
// Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/cuda_engine.h"
#include "model/error.h"
#include "model/translator.h"
#include "tests/support/bleu.h"
#include "tests/support/golden.h"

#if NMT_WITH_CUDA
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/layer_norm.h"
#include "kernels/quantize.h"
#endif

using namespace nmt;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): int8 on CUDA is not tested here"

TEST(CudaEngineInt8, CapabilityPolicy) {  // pure functions: run everywhere
  EXPECT_FALSE(cuda_int8_supported(6, 1));
  EXPECT_FALSE(cuda_int8_supported(7, 5));
  EXPECT_TRUE(cuda_int8_supported(8, 0));
  EXPECT_TRUE(cuda_int8_supported(9, 0));
  EXPECT_FALSE(cuda_fp8_supported(8, 6));
  EXPECT_TRUE(cuda_fp8_supported(8, 9));
  EXPECT_TRUE(cuda_fp8_supported(9, 0));
  EXPECT_TRUE(cuda_fp8_supported(10, 0));
}

#if NMT_WITH_CUDA
namespace {

std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}
void round_half(std::vector<float>& v) {
  for (float& x : v) x = __half2float(__float2half_rn(x));
}

template <typename T>
struct Dev {  // a device copy of host values in T
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)); cudaMemset(p, 0, n * sizeof(T)); }
  template <typename S>
  explicit Dev(const std::vector<S>& h) : Dev(h.size()) {
    std::vector<T> t(h.size());
    for (size_t i = 0; i < h.size(); ++i) t[i] = T(h[i]);
    cudaMemcpy(p, t.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
  std::vector<float> get() const {
    std::vector<T> t(n);
    cudaMemcpy(t.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = float(t[i]);
    return f;
  }
};

}  // namespace

TEST(CudaEngineInt8, GemvAndDequantizeMatchTheCpuReference) {
  SKIP_WITHOUT_GPU();
  struct Shape { int n, k; };
  const kernels::Activation relu = kernels::Activation::kRelu, gelu = kernels::Activation::kGelu;
  uint32_t seed = 3;
  int variant = 0, checked = 0;
  for (const kernels::WeightBytes bytes : {kernels::WeightBytes::kInt8, kernels::WeightBytes::kE4m3}) {
  const bool e4m3 = bytes == kernels::WeightBytes::kE4m3;
  for (const Shape s : {Shape{37, 64}, Shape{1024, 1024}, Shape{301, 528}, Shape{600, 4096}}) {
    for (int rows : {1, 3, 4, 5, 8, 9, 16, 33, 64}) {
      const bool norm = s.k <= kernels::kInt8GemvNormK && variant % 2 == 1;
      const bool store_sum = variant % 4 == 3;
      const kernels::Activation* act = variant % 3 == 0 ? nullptr : variant % 3 == 1 ? &relu : &gelu;
      const bool logits = variant % 5 == 4;  // float32 output, no bias or activation
      ++variant;
      auto x = uniform(size_t(rows) * s.k, -1, 1, seed++), res = uniform(x.size(), -1, 1, seed++);
      auto w = uniform(size_t(s.n) * s.k, -0.1f, 0.1f, seed++), bias = uniform(s.n, -0.5f, 0.5f, seed++);
      auto nb = uniform(s.k, -0.2f, 0.2f, seed++), gamma = uniform(s.k, 0.5f, 1.5f, seed++),
           beta = uniform(s.k, -0.5f, 0.5f, seed++);
      for (auto* v : {&x, &res, &bias, &nb, &gamma, &beta}) round_half(*v);
      std::vector<int8_t> q(w.size());
      std::vector<float> scale(s.n), qv(w.size());  // qv: the value each byte of q stands for
      if (e4m3) kernels::quantize_rows_e4m3(w.data(), s.n, s.k, reinterpret_cast<uint8_t*>(q.data()), scale.data());
      else kernels::quantize_rows_int8(w.data(), s.n, s.k, 127, q.data(), scale.data());
      for (size_t i = 0; i < q.size(); ++i) qv[i] = e4m3 ? kernels::e4m3_to_float(uint8_t(q[i])) : float(q[i]);
      // The reference's input: x, or LN(x + residual + bias) rounded to float16 (the kernel keeps
      // the normalized rows in float16, as the float16 small GEMM does).
      std::vector<float> in = x, z(x.size());
      if (norm) {
        kernels::layer_norm_cpu(x.data(), res.data(), nb.data(), gamma.data(), beta.data(), in.data(), rows, s.k, 1e-5f);
        round_half(in);
        for (size_t i = 0; i < z.size(); ++i) z[i] = x[i] + res[i] + nb[int(i % s.k)];
      }
      std::vector<float> ref(size_t(rows) * s.n);
      if (!e4m3) {
        kernels::int8_linear_cpu(in.data(), rows, q.data(), scale.data(), logits ? nullptr : bias.data(), s.n, s.k,
                                 logits ? nullptr : act, ref.data());
      } else {  // int8_linear_cpu's sums over the e4m3 values
        for (int m = 0; m < rows; ++m)
          for (int j = 0; j < s.n; ++j) {
            double a = 0;
            for (int i = 0; i < s.k; ++i) a += double(in[size_t(m) * s.k + i]) * qv[size_t(j) * s.k + i];
            ref[size_t(m) * s.n + j] = float(a * scale[j]) + (logits ? 0.f : bias[j]);
          }
        if (!logits && act) kernels::bias_activation_cpu(ref.data(), nullptr, rows, s.n, *act);
      }
      Dev<__half> dx(x), dres(res), dbias(bias), dnb(nb), dg(gamma), db(beta), dout(x.size()), dy16(ref.size());
      Dev<int8_t> dq(q);
      Dev<float> dscale(scale), dy32(ref.size());
      kernels::SmallGemmNorm<__half> n;
      n.residual = dres.p; n.bias = dnb.p; n.gamma = dg.p; n.beta = db.p; n.out = dout.p; n.store_sum = store_sum;
      ASSERT_TRUE(kernels::int8_gemv_supported(dx.p, s.k, dq.p, logits ? nullptr : dbias.p, rows, s.k, norm ? &n : nullptr));
      if (logits)
        kernels::int8_gemv_cuda(dx.p, s.k, dq.p, dscale.p, dy32.p, s.n, rows, s.n, s.k, nullptr, norm ? &n : nullptr,
                                bytes);
      else
        kernels::int8_gemv_cuda(dx.p, s.k, dq.p, dscale.p, dbias.p, dy16.p, s.n, rows, s.n, s.k, act, nullptr,
                                norm ? &n : nullptr, bytes);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> y = logits ? dy32.get() : dy16.get();
      double worst = 0;
      for (int m = 0; m < rows; ++m)
        for (int j = 0; j < s.n; ++j) {
          double mag = 0;  // the products' magnitude: float32 sums and a float16 output round against it
          for (int i = 0; i < s.k; ++i) mag += std::fabs(double(in[size_t(m) * s.k + i]) * qv[size_t(j) * s.k + i] * scale[j]);
          const double r = ref[size_t(m) * s.n + j], tol = 1e-3 * mag + 2e-3 * std::fabs(r) + 1e-4;
          worst = std::max(worst, std::fabs(y[size_t(m) * s.n + j] - r) / tol);
        }
      EXPECT_LE(worst, 1.0) << "n " << s.n << " k " << s.k << " rows " << rows << " norm " << norm << " logits " << logits
                            << " e4m3 " << e4m3;
      if (norm) {  // the first column block wrote the residual stream: z, or LN(z)
        const std::vector<float> out = dout.get(), want = store_sum ? z : in;
        double err = 0;
        for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::fabs(double(out[i]) - want[i]) / (1e-2 + 2e-3 * std::fabs(want[i])));
        EXPECT_LE(err, 1.0) << "norm.out, rows " << rows << " store_sum " << store_sum;
      }
      ++checked;
    }
    // The dequantization for cuBLAS: q * scale in float16.
    std::vector<int8_t> q(size_t(s.n) * s.k);
    std::vector<float> scale(s.n), back(q.size());
    const auto w = uniform(q.size(), -2, 2, seed++);
    uint8_t* qb = reinterpret_cast<uint8_t*>(q.data());
    if (e4m3) kernels::quantize_rows_e4m3(w.data(), s.n, s.k, qb, scale.data());
    else kernels::quantize_rows_int8(w.data(), s.n, s.k, 127, q.data(), scale.data());
    if (e4m3) kernels::dequantize_rows_e4m3(qb, scale.data(), s.n, s.k, back.data());
    else kernels::dequantize_rows_int8(q.data(), scale.data(), s.n, s.k, back.data());
    Dev<int8_t> dq(q);
    Dev<float> dscale(scale);
    Dev<__half> dw(q.size());
    kernels::int8_dequantize_cuda(dq.p, dscale.p, s.n, s.k, dw.p, nullptr, bytes);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = dw.get();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], back[i], 1e-3 * std::fabs(back[i]) + 1e-7) << i;
  }
  }
  EXPECT_EQ(checked, 72);
}

// The tensor-core path's two ends: the quantizer bit for bit against quantize_rows_int8 (an
// all-zero row, a row stride past k), and the rescaling (float16 with bias and activation,
// float32 in place over the int32 products).
TEST(CudaEngineInt8, ActivationQuantizerAndRescaleMatchTheCpuReference) {
  SKIP_WITHOUT_GPU();
  const int rows = 37, k = 528, ldx = 544, n = 301;
  auto x = uniform(size_t(rows) * ldx, -3, 3, 11);
  round_half(x);
  for (int c = 0; c < ldx; ++c) x[size_t(5) * ldx + c] = 0.f;
  std::vector<float> packed(size_t(rows) * k);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; ++c) packed[size_t(r) * k + c] = x[size_t(r) * ldx + c];
  std::vector<int8_t> q(packed.size());
  std::vector<float> scale(rows);
  kernels::quantize_rows_int8(packed.data(), rows, k, 127, q.data(), scale.data());
  Dev<__half> dx(x);
  Dev<int8_t> dq(q.size());
  Dev<float> ds{size_t(rows)};
  kernels::int8_quantize_rows_cuda(dx.p, ldx, rows, k, dq.p, ds.p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto gq = dq.get(), gs = ds.get();
  int differ = 0;
  for (size_t i = 0; i < q.size(); ++i) differ += int(gq[i]) != int(q[i]);
  EXPECT_EQ(differ, 0);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(gs[r], scale[r]) << "row " << r;
  EXPECT_EQ(gs[5], 1.f);
  {  // e4m3 (fp8): the same against quantize_rows_e4m3
    std::vector<uint8_t> q8(packed.size());
    std::vector<float> s8(rows);
    kernels::quantize_rows_e4m3(packed.data(), rows, k, q8.data(), s8.data());
    kernels::int8_quantize_rows_cuda(dx.p, ldx, rows, k, dq.p, ds.p, nullptr, kernels::WeightBytes::kE4m3);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int8_t> g8(q8.size());
    cudaMemcpy(g8.data(), dq.p, g8.size(), cudaMemcpyDeviceToHost);
    const auto gs8 = ds.get();
    int differ8 = 0;
    for (size_t i = 0; i < q8.size(); ++i) differ8 += uint8_t(g8[i]) != q8[i];
    EXPECT_EQ(differ8, 0);
    for (int r = 0; r < rows; ++r) EXPECT_EQ(gs8[r], s8[r]) << "e4m3 row " << r;
  }

  std::vector<int32_t> acc(size_t(rows) * n);
  std::mt19937 gen(12);
  std::uniform_int_distribution<int32_t> dist(-2000000, 2000000);
  for (auto& v : acc) v = dist(gen);
  const auto wscale = uniform(n, 1e-4f, 1e-3f, 13);
  auto bias = uniform(n, -1, 1, 14);
  round_half(bias);
  const kernels::Activation gelu = kernels::Activation::kGelu;
  std::vector<float> ref16(acc.size()), ref32(acc.size());
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < n; ++j) {
      const size_t i = size_t(m) * n + j;
      ref32[i] = float(acc[i]) * scale[m] * wscale[j];
      ref16[i] = ref32[i] + bias[j];
    }
  kernels::bias_activation_cpu(ref16.data(), nullptr, rows, n, gelu);
  Dev<int32_t> dacc(acc);
  Dev<float> dws(wscale), dsc(scale);
  Dev<__half> dbias(bias), dy(acc.size());
  kernels::int8_rescale_cuda(dacc.p, n, dsc.p, dws.p, dbias.p, &gelu, dy.p, n, rows, n, nullptr);
  kernels::int8_rescale_cuda(dacc.p, n, dsc.p, dws.p, nullptr, nullptr, reinterpret_cast<float*>(dacc.p), n, rows,
                             n, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto y16 = dy.get();
  std::vector<float> y32(acc.size());
  cudaMemcpy(y32.data(), dacc.p, y32.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < acc.size(); ++i) {
    ASSERT_NEAR(y32[i], ref32[i], 1e-5 * std::fabs(ref32[i]) + 1e-6) << i;
    ASSERT_NEAR(y16[i], ref16[i], 2e-3 * std::fabs(ref16[i]) + 1e-3) << i;
  }
}

// cuBLASLt's FP8 GEMM with the scales, bias and ReLU in its epilogue, against the same sums on
// the CPU from the e4m3 bytes (float16 out with bias and ReLU, float16 with bias only, float32
// with neither: the logits' form), on the machine's cuBLASLt: a build whose library took no
// outer-vector scaling would fail here rather than fall back unseen.
TEST(CudaEngineFp8, CublasLtGemmAppliesScalesBiasAndReluInItsEpilogue) {
  SKIP_WITHOUT_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (!cuda_fp8_supported(prop.major, prop.minor)) GTEST_SKIP() << "compute capability below 8.9: no FP8 GEMM";
  const int m = 37, k = 528, n = 304;
  const auto x = uniform(size_t(m) * k, -3, 3, 21), w = uniform(size_t(n) * k, -0.2f, 0.2f, 22);
  auto bias = uniform(n, -1, 1, 23);
  round_half(bias);
  std::vector<uint8_t> qx(x.size()), qw(w.size());
  std::vector<float> sx(m), sw(n);
  kernels::quantize_rows_e4m3(x.data(), m, k, qx.data(), sx.data());
  kernels::quantize_rows_e4m3(w.data(), n, k, qw.data(), sw.data());
  // Hopper's FP8 tensor cores add with fewer mantissa bits than float32 (cuBLASLt promotes
  // the partial sums to float32 every few k): the bound is relative to the terms' magnitudes.
  std::vector<float> sums(size_t(m) * n), magnitude(sums.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int c = 0; c < k; ++c) {
        const double t =
            double(kernels::e4m3_to_float(qx[size_t(i) * k + c])) * kernels::e4m3_to_float(qw[size_t(j) * k + c]);
        s += t;
        a += std::fabs(t);
      }
      sums[size_t(i) * n + j] = float(s) * sx[i] * sw[j];
      magnitude[size_t(i) * n + j] = float(a) * sx[i] * sw[j];
    }
  Dev<int8_t> dx(qx), dw(qw);
  Dev<float> dsx(sx), dsw(sw), dy32(sums.size());
  Dev<__half> dbias(bias), dy16(sums.size()), dyb(sums.size());
  ASSERT_TRUE(kernels::e4m3_gemm_cublaslt(dw.p, dsw.p, dx.p, dsx.p, n, m, k, dbias.p, true, dy16.p, n, nullptr));
  ASSERT_TRUE(kernels::e4m3_gemm_cublaslt(dw.p, dsw.p, dx.p, dsx.p, n, m, k, dbias.p, false, dyb.p, n, nullptr));
  ASSERT_TRUE(kernels::e4m3_gemm_cublaslt<float>(dw.p, dsw.p, dx.p, dsx.p, n, m, k, nullptr, false, dy32.p, n,
                                                 nullptr));
  EXPECT_FALSE(kernels::e4m3_gemm_cublaslt(dw.p, dsw.p, dx.p, dsx.p, n, m, k, nullptr, true, dy16.p, n, nullptr))
      << "a ReLU without its bias is not an epilogue it runs";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto relu = dy16.get(), biased = dyb.get(), plain = dy32.get();
  int negative = 0;
  for (size_t i = 0; i < sums.size(); ++i) {
    const float b = sums[i] + bias[i % size_t(n)];
    negative += b < 0;
    const float tol = 1e-4f * magnitude[i] + 1e-5f, tol16 = tol + 1e-3f * std::fabs(b);  // + float16's rounding
    ASSERT_NEAR(plain[i], sums[i], tol) << i;
    ASSERT_NEAR(biased[i], b, tol16) << i;
    ASSERT_NEAR(relu[i], std::max(b, 0.f), tol16) << i;
  }
  EXPECT_GT(negative, int(sums.size()) / 4);  // the ReLU had something to clip
}
#else
TEST(CudaEngineInt8, ActivationQuantizerAndRescaleMatchTheCpuReference) {
  GTEST_SKIP() << "built without CUDA: the int8 kernels are not tested here";
}
TEST(CudaEngineInt8, GemvAndDequantizeMatchTheCpuReference) {
  GTEST_SKIP() << "built without CUDA: the int8 kernels are not tested here";
}
TEST(CudaEngineFp8, CublasLtGemmAppliesScalesBiasAndReluInItsEpilogue) {
  GTEST_SKIP() << "built without CUDA: the FP8 GEMM is not tested here";
}
#endif

namespace {

struct Test2016Run {
  std::vector<std::vector<int>> ids;
  double bleu = 0;
  size_t memory = 0;
};

Test2016Run translate_test2016(Precision precision, int batch) {  // beam 4
  const auto golden = test::load_golden();
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = precision;
  auto translator = Translator::load(test::demo_model_dir(), o);
  EXPECT_EQ(translator->precision(), precision);
  DecodeOptions d;
  d.beam_size = 4;
  Test2016Run r;
  std::vector<std::string> hyps;
  for (size_t b = 0; b < golden.size(); b += size_t(batch)) {
    std::vector<std::vector<int>> src;
    for (size_t i = b; i < std::min(golden.size(), b + size_t(batch)); ++i) src.push_back(golden[i].source_ids);
    for (auto& t : translator->translate_ids(src, d)) {
      r.ids.push_back(t.hypotheses[0].ids);
      hyps.push_back(t.hypotheses[0].text);
    }
  }
  r.bleu = test::corpus_bleu(hyps, test::test2016_references());
  r.memory = translator->device_memory_used();
  return r;
}

// The quality bars for an 8-bit precision against float16 on the demo model: BLEU
// within 0.5 and at least `identical_percent` of the sentences token-identical.
void expect_agrees_with_float16(Precision precision, int identical_percent) {
  for (int batch : {1, 8, 64}) {
    static std::map<int, Test2016Run> float16_runs;  // the int8 and fp8 tests compare with the same runs
    if (!float16_runs.count(batch)) float16_runs[batch] = translate_test2016(Precision::kFloat16, batch);
    const Test2016Run& f16 = float16_runs[batch];
    const Test2016Run q = translate_test2016(precision, batch);
    ASSERT_EQ(f16.ids.size(), q.ids.size());
    int same = 0;
    for (size_t i = 0; i < f16.ids.size(); ++i) same += f16.ids[i] == q.ids[i];
    std::cout << precision_name(precision) << " vs float16, beam 4 batch " << batch << ": identical " << same << " / "
              << f16.ids.size() << ", BLEU " << q.bleu << " (float16 " << f16.bleu << "), GPU memory "
              << (q.memory >> 20) << " MiB (float16 " << (f16.memory >> 20) << " MiB)\n";
    EXPECT_GE(same, int(f16.ids.size()) * identical_percent / 100) << "batch " << batch;
    EXPECT_NEAR(q.bleu, f16.bleu, 0.5) << "batch " << batch;
  }
}

}  // namespace

TEST(CudaEngineInt8, DemoModelAgreesWithFloat16) {
  SKIP_WITHOUT_GPU();
  if (!test::have_golden()) GTEST_SKIP() << "golden references absent: " << test::golden_dir();
  expect_agrees_with_float16(Precision::kInt8, 90);
}

TEST(CudaEngineFp8, DemoModelAgreesWithFloat16) {
  SKIP_WITHOUT_GPU();
  if (!test::have_golden()) GTEST_SKIP() << "golden references absent: " << test::golden_dir();
#if NMT_WITH_CUDA
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  if (!cuda_fp8_supported(p.major, p.minor)) GTEST_SKIP() << "compute capability below 8.9: precision fp8 is refused";
#endif
  // The bars: with its output projection float16, fp8 left 904 / 905 / 904 of 1,000
  // identical at batch 1 / 8 / 64 (bench/history/engine-cuda.md, run 63; e4m3 logits: 886).
  // Under NMT_CUDA_INT8_GEMM=tensor-cores, which quantizes the activations to e4m3 too, batch
  // 64 left 869: that mode is for measuring.
  expect_agrees_with_float16(Precision::kFp8, 90);
}

TEST(CudaEngineFp8, RefusedOnTheCpu) {
  TranslatorOptions o;
  o.device = Device::kCpu;
  o.precision = Precision::kFp8;
  try {
    Translator::load(test::demo_model_dir(), o);
    ADD_FAILURE() << "precision fp8 on the CPU loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
  }
}
