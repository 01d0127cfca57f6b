#pragma once
// Helpers of the CUDA kernel tests: device buffers filled from float vectors (rounded to the
// kernel's element type, so the CPU reference sees exactly the kernel's inputs), NaN poison
// before each launch, and the relative-error check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/stream.h"

#if NMT_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace nmt::kernels::test {

#define NMT_SKIP_WITHOUT_GPU()                                                          \
  do {                                                                                  \
    int n_ = 0;                                                                         \
    const cudaError_t e_ = cudaGetDeviceCount(&n_);                                     \
    if (e_ != cudaSuccess || n_ == 0) {                                                 \
      cudaGetLastError();                                                               \
      GTEST_SKIP() << "no CUDA device: "                                                \
                   << (e_ != cudaSuccess ? cudaGetErrorString(e_) : "device count is 0"); \
    }                                                                                   \
  } while (0)

#define NMT_CHECK_CUDA(expr)                                                      \
  do {                                                                            \
    const cudaError_t e_ = (expr);                                                \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);        \
  } while (0)

// The fixture of the typed kernel tests, over every element type the kernels take: each test
// skips, saying why, where no GPU is visible. A suite names it with an alias:
//   template <typename T> using LayerNormCuda = CudaKernelTest<T>;
//   TYPED_TEST_SUITE(LayerNormCuda, KernelElementTypes);
template <typename T>
class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override { NMT_SKIP_WITHOUT_GPU(); }
};
using KernelElementTypes = ::testing::Types<float, __half, __nv_bfloat16>;

// Row widths that reach every dispatch branch of the row-wise kernels (LayerNorm, softmax):
// sub-warp groups with two rows per group (<= 32 packs), one warp with the row in registers
// (<= 1024, odd and prime ones take the 1-element pack with padding), a block with the row
// cached in shared memory (float up to ~58k columns, 16-bit T up to ~116k), and a block
// re-reading global memory (60013 in float, 120011 in every type).
inline constexpr int kRowwiseWidths[] = {
    1,    2,    3,    5,    7,    8,     13,    16,    31,    32,    33,    64,
    97,   127,  128,  255,  256,  509,   512,   768,   1000,  1021,  1024,  1025,
    1536, 2048, 3001, 4096, 8191, 12288, 16384, 32749, 32768, 60013, 120011};

template <typename T>
inline T to_t(float v) { return T(v); }
template <>
inline __half to_t<__half>(float v) { return __float2half_rn(v); }
template <>
inline __nv_bfloat16 to_t<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
inline float to_f(float v) { return v; }
inline float to_f(__half v) { return __half2float(v); }
inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
const char* type_name();
template <>
inline const char* type_name<float>() { return "float"; }
template <>
inline const char* type_name<__half>() { return "half"; }
template <>
inline const char* type_name<__nv_bfloat16>() { return "bfloat16"; }

// Tolerance on the relative error: 1e-5 for float32, 1e-2 for half; 2e-2 for bfloat16, whose
// 8-bit significand rounds 8x coarser than half's.
template <typename T>
constexpr float tolerance() { return sizeof(T) == 4 ? 1e-5f : 1e-2f; }
template <>
constexpr float tolerance<__nv_bfloat16>() { return 2e-2f; }

// Rounds every value to T and back, in place: the reference then uses the kernel's inputs.
template <typename T>
void round_to(std::vector<float>& v) {
  for (float& x : v) x = to_f(to_t<T>(x));
}

inline std::vector<float> random_vector(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Device memory of n elements of T; NaN-poisoned at birth (all-ones bytes are NaN in every
// floating type used here).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc failed");
    poison();
  }
  explicit DeviceBuffer(const std::vector<float>& host) : DeviceBuffer(host.size()) {
    upload(host);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  void upload(const std::vector<float>& host) {
    std::vector<T> tmp(host.size());
    for (size_t i = 0; i < host.size(); ++i) tmp[i] = to_t<T>(host[i]);
    if (cudaMemcpy(ptr_, tmp.data(), tmp.size() * sizeof(T), cudaMemcpyHostToDevice) !=
        cudaSuccess)
      throw std::runtime_error("cudaMemcpy H2D failed");
  }
  std::vector<float> download() const {
    std::vector<T> tmp(n_);
    if (cudaMemcpy(tmp.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy D2H failed");
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = to_f(tmp[i]);
    return out;
  }
  void poison() { cudaMemset(ptr_, 0xff, std::max<size_t>(n_, 1) * sizeof(T)); }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// Device ints (indices, lengths).
class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int>& host) : n_(host.size()) {
    cudaMalloc(&ptr_, std::max<size_t>(n_, 1) * sizeof(int));
    cudaMemcpy(ptr_, host.data(), n_ * sizeof(int), cudaMemcpyHostToDevice);
  }
  explicit DeviceInts(size_t n) : n_(n) {
    cudaMalloc(&ptr_, std::max<size_t>(n_, 1) * sizeof(int));
    cudaMemset(ptr_, 0xff, std::max<size_t>(n_, 1) * sizeof(int));
  }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  ~DeviceInts() { cudaFree(ptr_); }
  std::vector<int> download() const {
    std::vector<int> out(n_);
    cudaMemcpy(out.data(), ptr_, n_ * sizeof(int), cudaMemcpyDeviceToHost);
    return out;
  }
  int* get() const { return ptr_; }

 private:
  int* ptr_ = nullptr;
  size_t n_;
};

// Relative error |got - ref| / max(|ref|, floor), floor = floor_scale * rms(ref): elements near
// zero (LayerNorm outputs, attention averages, activations crossing zero) are judged against
// the scale of their tensor, every other element against itself. Infinities must match exactly
// and NaN (unwritten poison) always fails. Returns "" when within rtol, else a description of
// the worst element.
inline std::string compare(const std::vector<float>& got, const std::vector<float>& ref,
                           float rtol, float floor_scale = 1.f) {
  if (got.size() != ref.size()) return "size mismatch";
  double sq = 0.0;
  size_t finite = 0;
  for (float r : ref) {
    if (std::isfinite(r)) {
      sq += double(r) * r;
      ++finite;
    }
  }
  const double floor = std::max(floor_scale * std::sqrt(sq / double(std::max<size_t>(finite, 1))), 1e-30);
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return "NaN (unwritten?) at " + std::to_string(i);
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      if (got[i] != ref[i])
        return "at " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
               std::to_string(ref[i]);
      continue;
    }
    const double err = std::fabs(double(got[i]) - ref[i]) / std::max(double(std::fabs(ref[i])), floor);
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (worst <= rtol) return "";
  return "relative error " + std::to_string(worst) + " at " + std::to_string(worst_i) + ": got " +
         std::to_string(got[worst_i]) + ", want " + std::to_string(ref[worst_i]);
}

#define NMT_EXPECT_CLOSE(got, ref, rtol, what, ...)                                        \
  do {                                                                                     \
    const std::string msg_ = ::nmt::kernels::test::compare((got), (ref), (rtol), ##__VA_ARGS__); \
    EXPECT_TRUE(msg_.empty()) << (what) << ": " << msg_;                                   \
  } while (0)

}  // namespace nmt::kernels::test

#else  // CPU-only build: every CUDA test file registers one test that says why it skips.
#define NMT_CUDA_TESTS_COMPILED_OUT(suite)                                                  \
  TEST(suite, CompiledOut) {                                                                \
    GTEST_SKIP() << "no CUDA device: built without CUDA (NMT_WITH_CUDA=0), CUDA kernels are " \
                    "compiled out";                                                         \
  }
#endif
