#pragma once
// Welford's running mean and M2 with Chan's merge, for the LayerNorm kernels (layer_norm.cu),
// whose rows may stream through in several passes. The small GEMM's LayerNorm prologue holds
// its whole row in registers and takes two exact passes instead (small_gemm.cu). Only included
// by kernels/cuda/*.cu.
#include "kernels/cuda/common.cuh"

namespace nmt::kernels::cuda {

// Welford statistics (mean, M2, count) fed one pack at a time: the pack's own mean and M2
// (exact two-pass over N registers) are merged with Chan's formula, which for N = 1 is the
// classic Welford update. rcp_count is 1 / (count + N); the register kernels pass it as a
// compile-time constant. Values are shifted by the row's first element (the pivot) before
// they get here, which keeps a large row mean from eating the float32 precision of the
// deviations.
struct Welford {
  float mean = 0.f, m2 = 0.f, count = 0.f;
  template <int N>
  __device__ __forceinline__ void add_pack(const float* v, float rcp_count) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) sum += v[i];
    const float pack_mean = sum * (1.f / N);
    float pack_m2 = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) pack_m2 += (v[i] - pack_mean) * (v[i] - pack_mean);
    const float d = pack_mean - mean;
    const float wb = N * rcp_count;
    mean += d * wb;
    m2 += pack_m2 + d * d * count * wb;
    count += N;
  }
  __device__ __forceinline__ void merge(float b_mean, float b_m2, float b_count) {
    const float n = count + b_count;
    if (n == 0.f) return;
    const float d = b_mean - mean;
    const float wb = __fdividef(b_count, n);
    mean += d * wb;
    m2 += b_m2 + d * d * count * wb;
    count = n;
  }
};

template <int kWidth>
__device__ __forceinline__ void group_allreduce(Welford& w) {
#pragma unroll
  for (int mask = kWidth / 2; mask > 0; mask /= 2) {
    const float m = __shfl_xor_sync(0xffffffffu, w.mean, mask);
    const float m2 = __shfl_xor_sync(0xffffffffu, w.m2, mask);
    const float c = __shfl_xor_sync(0xffffffffu, w.count, mask);
    w.merge(m, m2, c);
  }
}

}  // namespace nmt::kernels::cuda
