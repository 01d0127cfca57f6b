// softmax_cuda (softmax and log-softmax, scale, key-length and causal masks) against
// softmax_cpu for every dispatch branch and element type.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include "kernels/softmax.h"

namespace nmt::kernels::test {
namespace {

// kRowwiseWidths: every dispatch branch; 16-bit rows wider than 16384 take the raw-T
// shared-memory cache, 120011 the uncached block kernel in every type.

template <typename T>
using SoftmaxCuda = CudaKernelTest<T>;
TYPED_TEST_SUITE(SoftmaxCuda, KernelElementTypes);

enum class Mask { kNone, kLengths, kCausal };

template <typename T>
void check(int64_t cols, bool log, Mask mask, uint32_t seed) {
  const int64_t rows = cols <= 64 ? 67 : cols <= 4096 ? 23 : 5;
  const size_t n = size_t(rows * cols);
  auto x = random_vector(n, -4.f, 4.f, seed);
  round_to<T>(x);
  SoftmaxOptions opt;
  opt.scale = 0.75f;
  opt.log = log;
  std::vector<int> lengths;
  if (mask == Mask::kLengths) {
    opt.rows_per_length = 3;
    std::mt19937 gen(seed);
    for (int64_t g = 0; g < (rows + 2) / 3; ++g)
      lengths.push_back(g == 1 ? 0 : int(gen() % (cols + 1)));  // one fully masked group
    opt.key_lengths = lengths.data();
  } else if (mask == Mask::kCausal) {
    opt.causal_rows = 4;
    opt.causal_offset = cols / 3;
  }
  std::vector<float> ref(n);
  softmax_cpu(x.data(), ref.data(), rows, cols, opt);

  DeviceBuffer<T> dx(x), dy(n);
  DeviceInts dlen(lengths);
  if (mask == Mask::kLengths) opt.key_lengths = dlen.get();
  softmax_cuda<T>(dx.get(), dy.get(), rows, cols, opt, nullptr);
  NMT_CHECK_CUDA(cudaDeviceSynchronize());
  const char* mask_name[] = {"", " key lengths", " causal"};
  NMT_EXPECT_CLOSE(dy.download(), ref, tolerance<T>(),
                   std::string(type_name<T>()) + (log ? " log-softmax" : " softmax") +
                       " cols=" + std::to_string(cols) + mask_name[int(mask)]);
}

TYPED_TEST(SoftmaxCuda, AllWidths) {
  uint32_t seed = 1;
  for (int cols : kRowwiseWidths) check<TypeParam>(cols, false, Mask::kNone, seed += 3);
}

TYPED_TEST(SoftmaxCuda, LogAllWidths) {
  uint32_t seed = 2000;
  for (int cols : kRowwiseWidths) check<TypeParam>(cols, true, Mask::kNone, seed += 3);
}

TYPED_TEST(SoftmaxCuda, KeyLengthsAllWidths) {
  uint32_t seed = 4000;
  for (int cols : kRowwiseWidths) {
    check<TypeParam>(cols, false, Mask::kLengths, seed += 3);
    check<TypeParam>(cols, true, Mask::kLengths, seed += 3);
  }
}

TYPED_TEST(SoftmaxCuda, CausalAllWidths) {
  uint32_t seed = 6000;
  for (int cols : kRowwiseWidths) check<TypeParam>(cols, false, Mask::kCausal, seed += 3);
}

}  // namespace
}  // namespace nmt::kernels::test
#else
NMT_CUDA_TESTS_COMPILED_OUT(SoftmaxCuda)
#endif
