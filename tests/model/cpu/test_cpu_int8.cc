// The CPU engine's int8 path (model/cpu/gemm.h) without ../shared: the int8 GEMM against the
// float32 product within the error its quantization steps allow, and whole translations of
// the demo model against float32 on sentences written for this test.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/cpu/gemm.h"
#include "model/translator.h"
#include "tests/support/golden.h"

using namespace nmt;

TEST(CpuInt8, LinearWithinQuantizationError) {
  const int64_t m = 7, n = 33, k = 100;  // 3 x 32 through the vectorized quantization, 4 after it
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k)), bias(static_cast<size_t>(n)),
      y(static_cast<size_t>(m * n));
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = 0.1f * dist(rng);
  for (float& v : bias) v = dist(rng);
  x[5] = 0.f;  // a row of zeros must not divide by zero either
  std::fill(x.begin() + k, x.begin() + 2 * k, 0.f);
  const auto q = cpu::QuantizedMatrix::quantize(w.data(), n, k);
  cpu::int8_linear(x.data(), m, q, bias.data(), y.data());
  for (int64_t r = 0; r < m; ++r) {
    float xmax = 0.f;
    for (int64_t c = 0; c < k; ++c) xmax = std::max(xmax, std::fabs(x[size_t(r * k + c)]));
    for (int64_t j = 0; j < n; ++j) {
      double ref = bias[size_t(j)], bound = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        const double xv = x[size_t(r * k + c)], wv = w[size_t(j * k + c)];
        ref += xv * wv;
        // Each factor is off by at most half its quantization step.
        bound += std::fabs(xv) * 0.5 * q.scale[size_t(j)] + std::fabs(wv) * 0.5 * xmax / 127.0 +
                 0.25 * q.scale[size_t(j)] * xmax / 127.0;
      }
      EXPECT_NEAR(y[size_t(r * n + j)], ref, bound + 1e-5) << "row " << r << " col " << j;
      if (r == 1) EXPECT_FLOAT_EQ(y[size_t(r * n + j)], bias[size_t(j)]);
    }
  }
}

// The int8 product through oneDNN's matmul on weights packed at load against the plain int8
// GEMM it replaces: both sum int8 products in int32, exactly, so the outputs are equal to the
// bit at the decode step's row counts and the encoder's more. The weights stay within +-64:
// CPUs without VNNI add int8 products in pairs in int16, which saturates beyond that, and
// the two GEMMs need not saturate alike.
TEST(CpuInt8, PackedProductEqualsPlainGemm) {
  const int64_t n = 301, k = 96;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> weight(-64, 64);
  std::normal_distribution<float> dist(0.f, 1.f);
  cpu::QuantizedMatrix packed;
  packed.rows = n;
  packed.cols = k;
  for (int64_t i = 0; i < n * k; ++i) packed.q.push_back(int8_t(weight(rng)));
  for (int64_t j = 0; j < n; ++j) packed.scale.push_back(0.01f + 0.001f * float(j));
  packed.packed = cpu::PackedMatrix::pack(packed.q.data(), n, k);
  ASSERT_TRUE(packed.packed) << "oneDNN offers no packed int8 matmul on this CPU";
  cpu::QuantizedMatrix plain = packed;
  plain.packed = nullptr;
  std::vector<float> bias(static_cast<size_t>(n));
  for (float& v : bias) v = dist(rng);
  for (int64_t m : {1, 4, 37, 128, 129, 1000, 4}) {  // 4 again: a row count seen before
    std::vector<float> x(static_cast<size_t>(m * k));
    for (float& v : x) v = dist(rng);
    std::vector<float> want(static_cast<size_t>(m * n)), got(static_cast<size_t>(m * n), std::nanf(""));
    cpu::int8_linear(x.data(), m, plain, bias.data(), want.data());
    cpu::int8_linear(x.data(), m, packed, bias.data(), got.data());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "m " << m << " at " << i;
  }
  // The packed product itself against int32 sums written out (a fallback to the plain GEMM
  // would pass the comparison above without running the matmul).
  std::uniform_int_distribution<int> activation(-127, 127);
  for (int64_t m : {1, 128}) {
    std::vector<int8_t> xq(static_cast<size_t>(m * k));
    for (int8_t& v : xq) v = int8_t(activation(rng));
    std::vector<int32_t> acc(static_cast<size_t>(m * n), -1);
    ASSERT_TRUE(packed.packed->product(xq.data(), m, acc.data())) << "m " << m << ": the packed layout does not fit";
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        int32_t want_acc = 0;
        for (int64_t c = 0; c < k; ++c) want_acc += int32_t(xq[size_t(r * k + c)]) * packed.q[size_t(j * k + c)];
        ASSERT_EQ(acc[size_t(r * n + j)], want_acc) << "m " << m << " row " << r << " col " << j;
      }
  }
  std::vector<int32_t> out(static_cast<size_t>(n));
  const std::vector<float> floats(static_cast<size_t>(k));
  EXPECT_FALSE(packed.packed->linear(floats.data(), 1, nullptr, reinterpret_cast<float*>(out.data())))
      << "int8 weights must refuse a float32 product";
}

TEST(CpuInt8, TranslationsCloseToFloat32) {
  const std::vector<std::string> sources = {
      "A dog runs across the yard.",
      "Two children are playing with a red ball.",
      "A woman is reading a book in the park.",
      "The man in the blue shirt is cooking dinner.",
      "A group of people are standing outside a building.",
      "A little girl is riding her bicycle down the street.",
      "Three men are sitting on a bench.",
      "A black cat sleeps on the sofa.",
      "A boy jumps into the lake.",
      "Two women are walking along the beach at sunset.",
      "A man is playing the guitar on a stage.",
      "People are waiting for the bus in the rain.",
      "A brown horse is eating grass in a field.",
      "The old man is fishing from a small boat.",
      "A young woman is taking a picture of the mountains.",
      "Children are swimming in the pool.",
      "A worker in an orange vest is fixing the road.",
      "A couple is dancing in the kitchen.",
      "Two dogs are fighting over a stick.",
      "A man wearing a hat sells fruit at the market.",
      "A baby is laughing at her mother.",
      "The team celebrates after winning the game.",
      "A cyclist rides past a white car.",
      "A girl in a pink dress holds a balloon.",
      "Several people are climbing a rock wall.",
      "A chef cuts vegetables in a restaurant.",
      "A snowboarder jumps over a hill of snow.",
      "Two men are carrying a heavy box up the stairs.",
      "A woman with long hair sings into a microphone.",
      "A child is drawing a picture with crayons.",
      "The students are listening to their teacher.",
      "A man sleeps under a tree.",
  };
  TranslatorOptions o;
  o.device = Device::kCpu;
  o.threads = 1;  // robust under a loaded ctest; the threads' effect is not what is tested
  o.precision = Precision::kFloat32;
  const auto f32 = Translator::load(test::demo_model_dir(), o);
  o.precision = Precision::kInt8;
  const auto int8 = Translator::load(test::demo_model_dir(), o);
  DecodeOptions d;
  d.beam_size = 4;
  d.return_scores = true;
  const auto a = f32->translate(sources, d), b = int8->translate(sources, d);
  ASSERT_EQ(a.size(), sources.size());
  ASSERT_EQ(b.size(), sources.size());
  int same = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const Hypothesis& x = a[i].hypotheses[0];
    const Hypothesis& y = b[i].hypotheses[0];
    EXPECT_FALSE(y.text.empty()) << i;
    EXPECT_TRUE(std::isfinite(y.score)) << i;
    same += x.ids == y.ids;
    // Where both chose the same tokens, their scores differ by the quantization noise only.
    if (x.ids == y.ids) EXPECT_NEAR(x.score, y.score, 0.05) << i << ": " << x.text;
  }
  std::cout << "int8 token-identical to float32: " << same << " / " << sources.size() << "\n";
  EXPECT_GE(same, int(sources.size()) * 3 / 4);
}
