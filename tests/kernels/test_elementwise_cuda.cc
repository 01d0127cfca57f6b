// Elementwise kernels (elementwise.h, activation.h) against their CPU references, with widths
// that take the 16-byte pack and widths that do not.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include "kernels/activation.h"
#include "kernels/elementwise.h"

namespace nmt::kernels::test {
namespace {

template <typename T>
class ElementwiseCuda : public ::testing::Test {
 protected:
  void SetUp() override { NMT_SKIP_WITHOUT_GPU(); }
};
using Types = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(ElementwiseCuda, Types);

const int kCols[] = {1, 7, 8, 64, 509, 512, 2048, 4099};

std::string what(const char* op, const char* type, int64_t cols) {
  return std::string(op) + " " + type + " cols=" + std::to_string(cols);
}

TYPED_TEST(ElementwiseCuda, BiasActivation) {
  using T = TypeParam;
  uint32_t seed = 3;
  for (int cols : kCols) {
    for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kSwish}) {
      const int64_t rows = 13;
      auto x = random_vector(size_t(rows * cols), -3.f, 3.f, seed++);
      auto bias = random_vector(size_t(cols), -1.f, 1.f, seed++);
      round_to<T>(x);
      round_to<T>(bias);
      auto ref = x;
      bias_activation_cpu(ref.data(), bias.data(), rows, cols, act);
      DeviceBuffer<T> dx(x), db(bias);
      bias_activation_cuda<T>(dx.get(), db.get(), rows, cols, act, nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      NMT_EXPECT_CLOSE(dx.download(), ref, tolerance<T>(),
                       what("bias_activation", type_name<T>(), cols));
      ref = x;
      bias_activation_cpu(ref.data(), nullptr, rows, cols, act);
      dx.upload(x);
      bias_activation_cuda<T>(dx.get(), nullptr, rows, cols, act, nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      NMT_EXPECT_CLOSE(dx.download(), ref, tolerance<T>(),
                       what("activation (no bias)", type_name<T>(), cols));
    }
  }
}

TYPED_TEST(ElementwiseCuda, AddBias) {
  using T = TypeParam;
  uint32_t seed = 50;
  for (int cols : kCols) {
    const int64_t rows = 11;
    auto x = random_vector(size_t(rows * cols), -3.f, 3.f, seed++);
    auto bias = random_vector(size_t(cols), -1.f, 1.f, seed++);
    round_to<T>(x);
    round_to<T>(bias);
    auto ref = x;
    add_bias_cpu(ref.data(), bias.data(), rows, cols);
    DeviceBuffer<T> dx(x), db(bias);
    add_bias_cuda<T>(dx.get(), db.get(), rows, cols, nullptr);
    NMT_CHECK_CUDA(cudaDeviceSynchronize());
    NMT_EXPECT_CLOSE(dx.download(), ref, tolerance<T>(), what("add_bias", type_name<T>(), cols));
  }
}

TYPED_TEST(ElementwiseCuda, EmbedPositions) {
  using T = TypeParam;
  uint32_t seed = 80;
  for (int d : kCols) {
    const int64_t rows = 19, vocab = 57, max_pos = 23;
    auto emb = random_vector(size_t(vocab * d), -1.f, 1.f, seed++);
    auto pos = random_vector(size_t(max_pos * d), -1.f, 1.f, seed++);
    round_to<T>(emb);
    round_to<T>(pos);
    std::mt19937 gen(seed);
    std::vector<int> ids(rows), positions(rows);
    for (int64_t r = 0; r < rows; ++r) {
      ids[r] = int(gen() % vocab);
      positions[r] = int(gen() % max_pos);
    }
    for (bool with_pos : {true, false}) {
      std::vector<float> ref(size_t(rows * d));
      embed_positions_cpu(ids.data(), emb.data(), with_pos ? pos.data() : nullptr,
                          positions.data(), ref.data(), rows, d, 22.627417f);
      DeviceBuffer<T> demb(emb), dpos(pos), dout(ref.size());
      DeviceInts dids(ids), dpositions(positions);
      embed_positions_cuda<T>(dids.get(), demb.get(), with_pos ? dpos.get() : nullptr,
                              dpositions.get(), dout.get(), rows, d, 22.627417f, nullptr);
      NMT_CHECK_CUDA(cudaDeviceSynchronize());
      NMT_EXPECT_CLOSE(dout.download(), ref, tolerance<T>(),
                       what(with_pos ? "embed+positions" : "embed", type_name<T>(), d));
    }
  }
}

TYPED_TEST(ElementwiseCuda, GatherRowsAndKvAppend) {
  using T = TypeParam;
  uint32_t seed = 120;
  for (int d : kCols) {
    // beam reorder of a cache [rows, max_len, d]: copy only the used prefix of each row
    const int64_t rows = 12, max_len = 9, used = 5;
    const int64_t stride = max_len * d;
    auto src = random_vector(size_t(rows * stride), -1.f, 1.f, seed++);
    round_to<T>(src);
    std::vector<int> index(rows);
    std::mt19937 gen(seed);
    for (auto& i : index) i = int(gen() % rows);
    std::vector<float> ref(src.size(), std::nanf(""));
    gather_rows_cpu(src.data(), ref.data(), index.data(), rows, stride, stride, used * d);
    DeviceBuffer<T> dsrc(src), ddst(src.size());
    DeviceInts dindex(index);
    gather_rows_cuda<T>(dsrc.get(), ddst.get(), dindex.get(), rows, stride, stride, used * d,
                        nullptr);
    NMT_CHECK_CUDA(cudaDeviceSynchronize());
    auto got = ddst.download();
    std::vector<float> got_used, ref_used;
    for (size_t i = 0; i < got.size(); ++i) {
      if (int64_t(i) % stride < used * d) {
        got_used.push_back(got[i]);
        ref_used.push_back(ref[i]);
      } else {
        EXPECT_TRUE(std::isnan(got[i])) << "gather wrote past the used prefix at " << i;
      }
    }
    NMT_EXPECT_CLOSE(got_used, ref_used, 0.f, what("gather_rows", type_name<T>(), d));

    // append step 4 from a fused K|V projection output [rows, 2 * d]
    auto kv_new = random_vector(size_t(rows * 2 * d), -1.f, 1.f, seed++);
    round_to<T>(kv_new);
    auto kc = src, vc = src;
    kv_append_cpu(kv_new.data(), kv_new.data() + d, 2 * d, kc.data(), vc.data(), rows, 4, max_len,
                  d);
    DeviceBuffer<T> dnew(kv_new), dk(src), dv(src);
    kv_append_cuda<T>(dnew.get(), dnew.get() + d, 2 * d, dk.get(), dv.get(), rows, 4, max_len, d,
                      nullptr);
    NMT_CHECK_CUDA(cudaDeviceSynchronize());
    NMT_EXPECT_CLOSE(dk.download(), kc, 0.f, what("kv_append K", type_name<T>(), d));
    NMT_EXPECT_CLOSE(dv.download(), vc, 0.f, what("kv_append V", type_name<T>(), d));
  }
}

template <typename From, typename To>
void check_convert(int64_t n, uint32_t seed) {
  auto x = random_vector(size_t(n), -100.f, 100.f, seed);
  round_to<From>(x);
  auto ref = x;
  round_to<To>(ref);
  DeviceBuffer<From> dsrc(x);
  DeviceBuffer<To> ddst{size_t(n)};
  convert_cuda<From, To>(dsrc.get(), ddst.get(), n, nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  NMT_EXPECT_CLOSE(ddst.download(), ref, 0.f,
                   std::string("convert ") + type_name<From>() + "->" + type_name<To>() +
                       " n=" + std::to_string(n));
}

TEST(ElementwiseCudaConvert, AllPairs) {
  NMT_SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 7, 8, 4096, 100003}) {
    check_convert<float, __half>(n, 1);
    check_convert<__half, float>(n, 2);
    check_convert<float, __nv_bfloat16>(n, 3);
    check_convert<__nv_bfloat16, float>(n, 4);
    check_convert<__half, __nv_bfloat16>(n, 5);
    check_convert<__nv_bfloat16, __half>(n, 6);
  }
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(ElementwiseCuda)
#endif
