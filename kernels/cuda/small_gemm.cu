// Few-row dense projection (kernels/small_gemm.h). A decode step at batch 1 multiplies 4 rows
// (beam 4) by each weight matrix: cuBLAS's smallest tiles then spend most of a launch on
// latency, and the fc1 bias + activation needs a launch of its own. Here a warp owns one output
// column: its 32 lanes stride along K in 16-byte packs of the weight row, each pack multiplied
// into all rows (x is small and stays in L1), then a butterfly reduction gives every lane the
// column's sums and lane m writes row m with the bias and activation applied. Launched with
// programmatic dependent launch (common.cuh), each lane loads its first weight packs before
// waiting for the previous kernel: the weights do not depend on it.
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/small_gemm.h"

namespace nmt::kernels {
namespace cuda {
namespace {

constexpr int kWarps = 4;  // columns per block

template <typename T>
struct SmallGemmArgs {
  const T* x;
  const T* w;
  const T* bias;
  T* y;
  int64_t ldx, ldy;
  int rows, n, k;
  bool has_act;
  Activation act;
};

// Lane's weight packs loaded before pdl_prologue(): they do not depend on the previous kernel,
// so with programmatic dependent launch their reads overlap its end (4 packs per lane cover
// K <= 1024 in 16-bit types, the whole row of most projections).
constexpr int kEarlyPacks = 4;

// acc[m] += w . x[m, k:k + kVec] for the rows present.
template <typename T, int kRows, int kVec>
__device__ __forceinline__ void multiply_rows(const SmallGemmArgs<T>& a, const float* w, int k, float* acc) {
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m < a.rows) {
      float xv[kVec];
      load_pack<T, kVec>(a.x + m * a.ldx + k, xv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[m] += w[e] * xv[e];
    }
  }
}

// kRows: rows rounded up to a power of two (the accumulators are registers).
template <typename T, int kRows>
__global__ void __launch_bounds__(kWarps * 32) small_gemm_kernel(SmallGemmArgs<T> a) {
  constexpr int kVec = 16 / int(sizeof(T));
  const int lane = threadIdx.x % 32;
  const int col = blockIdx.x * kWarps + threadIdx.x / 32;
  const T* w = a.w + int64_t(col < a.n ? col : 0) * a.k;
  float early[kEarlyPacks][kVec];
#pragma unroll
  for (int i = 0; i < kEarlyPacks; ++i) {
    const int k = (lane + 32 * i) * kVec;
    if (k < a.k) load_pack<T, kVec>(w + k, early[i]);
  }
  pdl_prologue();
  if (col >= a.n) return;  // whole warp
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.f;
#pragma unroll
  for (int i = 0; i < kEarlyPacks; ++i) {
    const int k = (lane + 32 * i) * kVec;
    if (k < a.k) multiply_rows<T, kRows, kVec>(a, early[i], k, acc);
  }
#pragma unroll 4
  for (int k = (lane + 32 * kEarlyPacks) * kVec; k < a.k; k += 32 * kVec) {
    float wv[kVec];
    load_pack<T, kVec>(w + k, wv);
    multiply_rows<T, kRows, kVec>(a, wv, k, acc);
  }
  float mine = 0.f;  // lane m keeps row m's sum
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const float sum = group_allreduce<32>(acc[m], SumOp());
    if (lane == m) mine = sum;
  }
  if (lane < a.rows) {
    float v = mine + (a.bias ? to_float(a.bias[col]) : 0.f);
    if (a.has_act) v = activate(v, a.act);
    a.y[lane * a.ldy + col] = from_float<T>(v);
  }
}

template <typename T, int kRows>
void launch_rows(const SmallGemmArgs<T>& a, cudaStream_t stream) {
  launch(&small_gemm_kernel<T, kRows>, unsigned((a.n + kWarps - 1) / kWarps), kWarps * 32, 0, stream, a);
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace
}  // namespace cuda

template <typename T>
bool small_gemm_supported(const T* x, int64_t ldx, const T* w, const T* bias, int64_t ldy,
                          int rows, int k) {
  constexpr int kVec = 16 / int(sizeof(T));
  return rows >= 1 && rows <= kSmallGemmRows && k % kVec == 0 && ldx % kVec == 0 && ldy >= 1 &&
         cuda::aligned(x) && cuda::aligned(w) && (!bias || cuda::aligned(bias));
}

template <typename T>
void small_gemm_cuda(const T* x, int64_t ldx, const T* w, const T* bias, T* y, int64_t ldy,
                     int rows, int n, int k, const Activation* act, cudaStream_t stream) {
  using namespace cuda;
  if (!small_gemm_supported(x, ldx, w, bias, ldy, rows, k))
    throw std::invalid_argument("small_gemm_cuda: unsupported shape or alignment");
  if (n <= 0) return;
  const SmallGemmArgs<T> a{x, w, bias, y, ldx, ldy, rows, n, k, act != nullptr,
                           act ? *act : Activation::kRelu};
  if (rows <= 1) return launch_rows<T, 1>(a, stream);
  if (rows <= 2) return launch_rows<T, 2>(a, stream);
  if (rows <= 4) return launch_rows<T, 4>(a, stream);
  if (rows <= 8) return launch_rows<T, 8>(a, stream);
  launch_rows<T, 16>(a, stream);
}

#define NMT_SMALL_GEMM(T)                                                                      \
  template bool small_gemm_supported<T>(const T*, int64_t, const T*, const T*, int64_t, int,  \
                                        int);                                                  \
  template void small_gemm_cuda<T>(const T*, int64_t, const T*, const T*, T*, int64_t, int, int, \
                                   int, const Activation*, cudaStream_t);
NMT_SMALL_GEMM(float)
NMT_SMALL_GEMM(__half)
NMT_SMALL_GEMM(__nv_bfloat16)
#undef NMT_SMALL_GEMM

}  // namespace nmt::kernels
