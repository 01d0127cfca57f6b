// LayerNorm with the residual add and bias fused into the load (see kernels/layer_norm.h).
// Statistics: Welford in float32, merged across lanes and warps with Chan's formula.
#include <stdexcept>

#include "kernels/cuda/rowwise.cuh"
#include "kernels/cuda/welford.cuh"
#include "kernels/layer_norm.h"

namespace nmt::kernels {
namespace cuda {
namespace {

// z = x + residual + bias for N consecutive columns of one row; kSum: z also stored to sum
// (a pre-norm residual stream; a compile-time choice, so that the post-norm kernels stay as
// they are). The kernels may load a pack twice: it stores the same values again.
template <typename T, int N, bool kSum = false>
struct LnLoad {
  const T* x;
  const T* residual;
  const T* bias;
  int64_t cols;
  T* sum = nullptr;
  __device__ __forceinline__ void operator()(float* dst, int64_t row, int64_t col) const {
    const int64_t off = row * cols + col;
    load_pack<T, N>(x + off, dst);
    float t[N];
    if (residual) {
      load_pack<T, N>(residual + off, t);
#pragma unroll
      for (int i = 0; i < N; ++i) dst[i] += t[i];
    }
    if (bias) {
      load_pack<T, N>(bias + col, t);
#pragma unroll
      for (int i = 0; i < N; ++i) dst[i] += t[i];
    }
    if constexpr (kSum) store_pack<T, N>(sum + off, dst);
  }
};

// y = (z - mean) * inv_std * gamma + beta for N consecutive columns of one row.
template <typename T, int N>
struct LnStore {
  T* y;
  const T* gamma;
  const T* beta;
  int64_t cols;
  __device__ __forceinline__ void operator()(const float* z, int64_t row, int64_t col,
                                             float mean, float inv_std) const {
    float out[N], g[N], b[N];
    if (gamma) load_pack<T, N>(gamma + col, g);
    if (beta) load_pack<T, N>(beta + col, b);
#pragma unroll
    for (int i = 0; i < N; ++i)
      out[i] = (z[i] - mean) * inv_std * (gamma ? g[i] : 1.f) + (beta ? b[i] : 0.f);
    store_pack<T, N>(y + row * cols + col, out);
  }
};

__device__ void block_allreduce(Welford& w) {
  __shared__ float s_mean[32], s_m2[32], s_count[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  group_allreduce<32>(w);
  if (lane == 0) {
    s_mean[warp] = w.mean;
    s_m2[warp] = w.m2;
    s_count[warp] = w.count;
  }
  __syncthreads();
  Welford t;
  if (lane < int(blockDim.x / 32)) {
    t.mean = s_mean[lane];
    t.m2 = s_m2[lane];
    t.count = s_count[lane];
  }
  group_allreduce<32>(t);  // every warp reduces the same values: no second barrier needed
  w = t;
  __syncthreads();  // s_* may be reused by the caller's next row
}

__device__ __forceinline__ void write_stats(float* mean, float* inv_std, int64_t row,
                                            float m, float r) {
  if (mean) mean[row] = m;
  if (inv_std) inv_std[row] = r;
}

// A group of kGroup lanes handles kRows rows at a time, kCols columns per lane in registers.
template <class Load, class Store, int N, int kCols, int kGroup, int kRows>
__device__ __forceinline__ void ln_warp_body(Load load, Store store, int64_t rows, int64_t cols,
                                             float eps, float* mean, float* inv_std) {
  constexpr int kPacks = kCols / N;
  float buf[kRows][kCols];
  const int lane = threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.y * kRows;
  // The loop bound is the first row of the warp, so that all groups of a warp iterate together
  // (their shuffles use the full mask); rows past the end are masked inside.
  constexpr int kGroupsPerWarp = 32 / kGroup;
  const int64_t group = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t warp_group0 = group / kGroupsPerWarp * kGroupsPerWarp;
  for (int64_t row0 = group * kRows, warp_row0 = warp_group0 * kRows; warp_row0 < rows;
       row0 += step, warp_row0 += step) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int64_t col = (int64_t(p) * kGroup + lane) * N;
        if (row0 + r < rows && col < cols) load(buf[r] + p * N, row0 + r, col);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // pivot: the row's first element, held by the group's first lane
      const float pivot = __shfl_sync(0xffffffffu, buf[r][0], 0, kGroup);
      Welford w;
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int64_t col = (int64_t(p) * kGroup + lane) * N;
        if (row0 + r < rows && col < cols) {  // valid packs of a lane form a prefix
#pragma unroll
          for (int i = 0; i < N; ++i) buf[r][p * N + i] -= pivot;
          w.add_pack<N>(buf[r] + p * N, 1.f / float((p + 1) * N));
        }
      }
      group_allreduce<kGroup>(w);
      const float inv = rsqrtf(w.m2 / w.count + eps);
      if (row0 + r >= rows) continue;
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int64_t col = (int64_t(p) * kGroup + lane) * N;
        if (col < cols) store(buf[r] + p * N, row0 + r, col, w.mean, inv);
      }
      if (lane == 0) write_stats(mean, inv_std, row0 + r, pivot + w.mean, inv);
    }
  }
}

// Two register budgets: the packed variants holding 24 or more columns per lane are capped at
// 64 registers (8 blocks of 128 per SM; measured on H100 this took (49152, 1024) fp16 from 79%
// to 81% of copy bandwidth), the others keep what they naturally use (a cap made them spill or
// lose occupancy).
template <class Load, class Store, int N, int kCols, int kGroup, int kRows>
__global__ void __launch_bounds__(kWarpThreads) ln_warp_kernel(Load load, Store store,
                                                               int64_t rows, int64_t cols,
                                                               float eps, float* mean,
                                                               float* inv_std) {
  pdl_prologue();
  ln_warp_body<Load, Store, N, kCols, kGroup, kRows>(load, store, rows, cols, eps, mean, inv_std);
}
template <class Load, class Store, int N, int kCols, int kGroup, int kRows>
__global__ void __launch_bounds__(kWarpThreads, 8) ln_warp_kernel_capped(
    Load load, Store store, int64_t rows, int64_t cols, float eps, float* mean, float* inv_std) {
  pdl_prologue();
  ln_warp_body<Load, Store, N, kCols, kGroup, kRows>(load, store, rows, cols, eps, mean, inv_std);
}
template <class Load, class Store, int N, int kCols, int kGroup, int kRows>
constexpr auto ln_warp_kernel_for() {
  if constexpr (kCols >= 24 && N > 1)
    return &ln_warp_kernel_capped<Load, Store, N, kCols, kGroup, kRows>;
  else
    return &ln_warp_kernel<Load, Store, N, kCols, kGroup, kRows>;
}

template <class Load, int N>
__device__ __forceinline__ float row_pivot(const Load& load, int64_t row) {
  float first[N];
  load(first, row, 0);  // the same address for every thread: one broadcast transaction
  return first[0];
}

// One block per row, the row cached in shared memory as C (float, or T itself when the loaded
// value is exactly x: no residual or bias), column-interleaved: element i of pack p sits at
// i * num_packs + p so that consecutive lanes touch consecutive banks.
template <class Load, class Store, int N, typename C>
__global__ void ln_smem_kernel(Load load, Store store, int64_t rows, int64_t cols, float eps,
                               float* mean, float* inv_std) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char ln_smem_raw[];
  C* cache = reinterpret_cast<C*>(ln_smem_raw);
  const int num_packs = int(cols / N);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float pivot = row_pivot<Load, N>(load, row);
    Welford w;
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
      load(v, row, int64_t(p) * N);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        cache[i * num_packs + p] = from_float<C>(v[i]);
        v[i] -= pivot;
      }
      w.add_pack<N>(v, 1.f / (w.count + N));
    }
    block_allreduce(w);
    const float inv = rsqrtf(w.m2 / w.count + eps);
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = to_float(cache[i * num_packs + p]) - pivot;
      store(v, row, int64_t(p) * N, w.mean, inv);
    }
    if (threadIdx.x == 0) write_stats(mean, inv_std, row, pivot + w.mean, inv);
    __syncthreads();  // the cache is overwritten by the next row
  }
}

// One block per row, re-reading the row from global memory (L2) for the second pass.
template <class Load, class Store, int N>
__global__ void __launch_bounds__(1024) ln_uncached_kernel(Load load, Store store, int64_t rows,
                                                           int64_t cols, float eps, float* mean,
                                                           float* inv_std) {
  pdl_prologue();
  const int num_packs = int(cols / N);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float pivot = row_pivot<Load, N>(load, row);
    Welford w;
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
      load(v, row, int64_t(p) * N);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] -= pivot;
      w.add_pack<N>(v, 1.f / (w.count + N));
    }
    block_allreduce(w);
    const float inv = rsqrtf(w.m2 / w.count + eps);
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
      load(v, row, int64_t(p) * N);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] -= pivot;
      store(v, row, int64_t(p) * N, w.mean, inv);
    }
    if (threadIdx.x == 0) write_stats(mean, inv_std, row, pivot + w.mean, inv);
  }
}

template <typename T, int N, bool kSum>
struct LnKernels {
  using Load = LnLoad<T, N, kSum>;
  using Store = LnStore<T, N>;
  Load load;
  Store store;
  int64_t rows, cols;
  float eps;
  float *mean, *inv_std;

  // The cache holds T when the loaded value is x itself (exact in T), else float.
  bool cache_in_t() const { return load.residual == nullptr && load.bias == nullptr; }

  template <int kCols, int kGroup, int kRows>
  const void* warp_kernel() const {
    return reinterpret_cast<const void*>(ln_warp_kernel_for<Load, Store, N, kCols, kGroup, kRows>());
  }
  template <int kCols, int kGroup, int kRows>
  void launch_warp(dim3 grid, dim3 block, cudaStream_t s) const {
    launch(ln_warp_kernel_for<Load, Store, N, kCols, kGroup, kRows>(), grid, block, 0, s, load, store, rows,
           cols, eps, mean, inv_std);
  }
  size_t smem_bytes() const { return size_t(cols) * (cache_in_t() ? sizeof(T) : sizeof(float)); }
  const void* smem_kernel() const {
    return cache_in_t() ? reinterpret_cast<const void*>(&ln_smem_kernel<Load, Store, N, T>)
                        : reinterpret_cast<const void*>(&ln_smem_kernel<Load, Store, N, float>);
  }
  void launch_smem(dim3 grid, dim3 block, size_t smem, cudaStream_t s) const {
    if (cache_in_t())
      launch(&ln_smem_kernel<Load, Store, N, T>, grid, block, smem, s, load, store, rows, cols, eps, mean,
             inv_std);
    else
      launch(&ln_smem_kernel<Load, Store, N, float>, grid, block, smem, s, load, store, rows, cols, eps,
             mean, inv_std);
  }
  const void* uncached_kernel() const {
    return reinterpret_cast<const void*>(&ln_uncached_kernel<Load, Store, N>);
  }
  void launch_uncached(dim3 grid, dim3 block, cudaStream_t s) const {
    launch(&ln_uncached_kernel<Load, Store, N>, grid, block, 0, s, load, store, rows, cols, eps, mean,
           inv_std);
  }
};

template <typename T, int N>
void run(const T* x, const T* residual, const T* bias, const T* gamma, const T* beta, T* y,
         int64_t rows, int64_t cols, float eps, cudaStream_t stream, float* mean,
         float* inv_std, T* sum) {
  if (sum) {
    using K = LnKernels<T, N, true>;
    const K k{{x, residual, bias, cols, sum}, {y, gamma, beta, cols}, rows, cols, eps, mean, inv_std};
    return dispatch_rowwise<K, N>(k, rows, cols, stream);
  }
  using K = LnKernels<T, N, false>;
  const K k{{x, residual, bias, cols}, {y, gamma, beta, cols}, rows, cols, eps, mean, inv_std};
  dispatch_rowwise<K, N>(k, rows, cols, stream);
}

}  // namespace
}  // namespace cuda

template <typename T>
void layer_norm_cuda(const T* x, const T* residual, const T* bias, const T* gamma, const T* beta,
                     T* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream,
                     float* mean, float* inv_std, T* sum) {
  if (sum && (sum == x || sum == residual || sum == y))
    throw std::invalid_argument("layer_norm_cuda: sum must be neither x, residual nor y");
  constexpr int kFull = 16 / int(sizeof(T));
  if (cuda::pick_pack<T>(cols, {x, residual, bias, gamma, beta, y, sum}) == kFull)
    cuda::run<T, kFull>(x, residual, bias, gamma, beta, y, rows, cols, eps, stream, mean, inv_std, sum);
  else
    cuda::run<T, 1>(x, residual, bias, gamma, beta, y, rows, cols, eps, stream, mean, inv_std, sum);
}

#define NMT_INSTANTIATE(T)                                                                     \
  template void layer_norm_cuda<T>(const T*, const T*, const T*, const T*, const T*, T*,       \
                                   int64_t, int64_t, float, cudaStream_t, float*, float*, T*);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
NMT_INSTANTIATE(__nv_bfloat16)
#undef NMT_INSTANTIATE

}  // namespace nmt::kernels
