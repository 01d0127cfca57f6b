#pragma once
// The CPU engine's exponentials over whole rows, through glibc's vector math library
// (libmvec, part of libc6) with AVX-512 or AVX2 where the CPU has it (checked at run time: the release
// build targets baseline x86-64), else the scalar loop. libmvec's exp/expf are within 4 ulp /
// 1 ulp of the scalar ones, not bit-identical to them: the golden and conformance suites
// check that no beam-search decision moved.
#include <cstdint>

// Hot loops compiled twice, for AVX2 and for baseline x86-64 (the release build's target),
// the one the CPU has picked when the program loads (GCC's target_clones, an ifunc). "avx2"
// without "fma": no multiply-add is contracted, so the two round alike but for the order of
// vectorized sums.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define NMT_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define NMT_CPU_CLONES
#endif

namespace nmt::cpu {

// sum over c of exp(double(x[c] - shift)): the differences in float, exp and sum in double
// (kernels::softmax_cpu's log-sum-exp).
double sum_exp(const float* x, int64_t n, float shift);

// x[c] = x[c] / (1 + exp(-x[c])) in float (kernels::bias_activation_cpu's swish).
void swish(float* x, int64_t n);

}  // namespace nmt::cpu
