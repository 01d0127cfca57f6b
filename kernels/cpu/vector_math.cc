#include "kernels/cpu/vector_math.h"

#include <immintrin.h>

#include <cmath>

// glibc's libmvec entry points for AVX2 (the names GCC's vectorizer calls). Declared AVX2
// too: clang refuses a 256-bit vector argument to a function it does not know takes AVX.
extern "C" __attribute__((target("avx2"))) __m256d _ZGVdN4v_exp(__m256d);
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256);
extern "C" __attribute__((target("avx512f"))) __m512d _ZGVeN8v_exp(__m512d);

namespace nmt::cpu {
namespace {

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

// The log-sum-exp's exps 8 doubles at a time where the CPU has AVX-512 (libmvec's AVX-512
// exp: twice the AVX2 one's width; the exp of a step's whole vocabulary per row).
__attribute__((target("avx512f"))) double sum_exp_avx512(const float* x, int64_t n, float shift) {
  const __m256 m = _mm256_set1_ps(shift);
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512d a = _mm512_cvtps_pd(_mm256_sub_ps(_mm256_loadu_ps(x + c), m));
    const __m512d b = _mm512_cvtps_pd(_mm256_sub_ps(_mm256_loadu_ps(x + c + 8), m));
    acc0 = _mm512_add_pd(acc0, _ZGVeN8v_exp(a));
    acc1 = _mm512_add_pd(acc1, _ZGVeN8v_exp(b));
  }
  double sum = _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
  for (; c < n; ++c) sum += std::exp(double(x[c] - shift));
  return sum;
}

__attribute__((target("avx2,fma"))) double sum_exp_avx2(const float* x, int64_t n, float shift) {
  const __m128 m = _mm_set1_ps(shift);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256d a = _mm256_cvtps_pd(_mm_sub_ps(_mm_loadu_ps(x + c), m));
    const __m256d b = _mm256_cvtps_pd(_mm_sub_ps(_mm_loadu_ps(x + c + 4), m));
    acc0 = _mm256_add_pd(acc0, _ZGVdN4v_exp(a));
    acc1 = _mm256_add_pd(acc1, _ZGVdN4v_exp(b));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; c < n; ++c) sum += std::exp(double(x[c] - shift));
  return sum;
}

__attribute__((target("avx2,fma"))) void swish_avx2(float* x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    const __m256 e = _ZGVdN8v_expf(_mm256_xor_ps(v, sign));
    _mm256_storeu_ps(x + c, _mm256_div_ps(v, _mm256_add_ps(one, e)));
  }
  for (; c < n; ++c) x[c] = x[c] / (1.f + std::exp(-x[c]));
}

}  // namespace

double sum_exp(const float* x, int64_t n, float shift) {
  if (has_avx512()) return sum_exp_avx512(x, n, shift);
  if (has_avx2()) return sum_exp_avx2(x, n, shift);
  double sum = 0.0;
  for (int64_t c = 0; c < n; ++c) sum += std::exp(double(x[c] - shift));
  return sum;
}

void swish(float* x, int64_t n) {
  if (has_avx2()) return swish_avx2(x, n);
  for (int64_t c = 0; c < n; ++c) x[c] = x[c] / (1.f + std::exp(-x[c]));
}

}  // namespace nmt::cpu
