#pragma once
// Shared device helpers of the kernels: element conversion, 16-byte packs, warp/group
// reductions, the activations, error checks, and launch() with programmatic dependent launch.
// Only included by kernels/cuda/*.cu (and bench/kernels' phase-boundary benchmark, which
// measures pdl_prologue() itself).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/activation.h"
#include "kernels/cuda/trace.cuh"

namespace nmt::kernels::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define NMT_CUDA_CHECK(expr) ::nmt::kernels::cuda::check((expr), #expr)

template <typename T>
__device__ __forceinline__ float to_float(T v) { return float(v); }
template <>
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v) { return T(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// N elements of T moved as one load/store (16 bytes when N = 16 / sizeof(T)).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_pack(const T* p, float* dst) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) dst[i] = to_float(pk.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const float* src) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(src[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
}

// Largest pack (16 bytes at most) that divides cols and keeps every pointer aligned.
template <typename T>
inline int pick_pack(int64_t cols, std::initializer_list<const void*> ptrs) {
  constexpr int kFull = 16 / int(sizeof(T));
  if (cols % kFull != 0) return 1;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  return kFull;
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// All-reduce within groups of kWidth consecutive lanes (kWidth a power of two <= 32).
template <int kWidth, class Op>
__device__ __forceinline__ float group_allreduce(float v, Op op) {
#pragma unroll
  for (int mask = kWidth / 2; mask > 0; mask /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, mask));
  return v;
}

// A LayerNorm's statistic over the row that one warp holds in registers: each lane's sum of
// f(element) over its valid packs (each pack summed first, then the packs), then the sum across
// the warp. f may change the element it is given (the deviations pass subtracts the mean in
// place). Shared by small_gemm.cu's and quant/int8_gemm.cu's LayerNorm prologues, so that both
// add in the same order.
template <int kPacks, int kVec, class Valid, class F>
__device__ __forceinline__ float warp_row_sum(float (&z)[kPacks][kVec], Valid valid, F f) {
  float sum = 0.f;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if (!valid(p)) continue;
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) part += f(z[p][i]);
    sum += part;
  }
  return group_allreduce<32>(sum, SumOp());
}

// c += A (16 x 16, row-major fragments) B (16 x 8), T = __half or __nv_bfloat16 in, float32
// accumulation: the tensor-core step of small_gemm.cu and quant/int8_gemm.cu.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// All-reduce over the whole block (blockDim.x a multiple of 32, at most 1024).
template <class Op>
__device__ float block_allreduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = group_allreduce<32>(v, op);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? partial[lane] : identity;
    v = group_allreduce<32>(v, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;
}

inline int num_sms() {  // of the current device (a cheap attribute query)
  int dev = 0, sms = 0;
  NMT_CUDA_CHECK(cudaGetDevice(&dev));
  NMT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// Grid size for grid-stride kernels: enough waves to hide latency, never more blocks than work.
inline int grid_for(int64_t work_items, int items_per_block, int blocks_per_sm = 32) {
  const int64_t need = (work_items + items_per_block - 1) / items_per_block;
  const int64_t cap = int64_t(num_sms()) * blocks_per_sm;
  return int(need < cap ? (need > 0 ? need : 1) : cap);
}

// The feed-forward activations (activation.h) in float32.
__device__ __forceinline__ float activate(float v, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return v > 0.f ? v : 0.f;
    case Activation::kGelu:
      return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    case Activation::kSwish:
      return v / (1.f + expf(-v));
  }
  return v;
}

// Programmatic dependent launch (sm_90): every kernel of ours is launched through launch(),
// so that it may be scheduled while the kernel before it on the stream drains, hiding part of
// the launch latency between the short kernels of a decode step (a captured CUDA graph keeps
// the dependency as a programmatic edge). Each such kernel starts with pdl_prologue(), which
// waits until the previous kernel has finished and its writes are visible (so nothing is read
// or written early), then lets the next kernel be scheduled. NMT_CUDA_PDL=0 launches plainly
// (for measuring; pdl_prologue() then returns at once). A launch error (bad configuration)
// throws here; execution errors surface at a later synchronize.
// Letting the next kernel be scheduled before the wait instead (its weights read earlier still)
// made the step longer: end-to-end run 38. In trace builds (trace.cuh) block 0 also notes when
// it waited and when it was released.
__device__ __forceinline__ void pdl_prologue(uint32_t line = __builtin_LINE()) {
#if NMT_CUDA_TRACE
  const bool traced = trace_block();
  const uint32_t slot = traced ? trace_wait(line) : 0u;
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#if NMT_CUDA_TRACE
  if (traced) trace_release(slot);
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("NMT_CUDA_PDL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &pdl;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), "cudaLaunchKernelEx");
}

}  // namespace nmt::kernels::cuda
