// Softmax / log-softmax over rows with the scale and the key-length / causal mask fused into
// the load (see kernels/softmax.h). Same three-way dispatch as LayerNorm.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/rowwise.cuh"
#include "kernels/softmax.h"

namespace nmt::kernels {
namespace cuda {
namespace {

// exp in the kernels: the accurate expf for float32, the fast __expf (about 2 ulp, far below
// the output's rounding) for the 16-bit types.
template <typename T>
__device__ __forceinline__ float kernel_exp(float x) {
  if constexpr (sizeof(T) == 4)
    return expf(x);
  else
    return __expf(x);
}

// Reads x; transform() applies the scale and turns the columns past valid(row) into -inf.
template <typename T, int N>
struct SmLoad {
  const T* x;
  int64_t cols;
  float scale;
  const int* key_lengths;
  SoftmaxOptions opt;
  __device__ __forceinline__ int valid(int64_t row) const {  // rows are < 2^31 columns wide
    return int(softmax_valid_cols(row, cols, key_lengths, opt));
  }
  __device__ __forceinline__ void raw(float* dst, int64_t row, int64_t col) const {
    load_pack<T, N>(x + row * cols + col, dst);
  }
  __device__ __forceinline__ void transform(float* v, int col, int valid) const {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = col + i < valid ? v[i] * scale : -INFINITY;
  }
};

// y = v * mul (softmax: v already exp(x - max), mul = 1 / sum) or v - shift (log-softmax:
// shift = max + log(sum), masked columns stay -inf).
template <typename T, int N>
struct SmStore {
  T* y;
  int64_t cols;
  bool log;
  __device__ __forceinline__ void operator()(const float* v, int64_t row, int64_t col,
                                             float shift, float mul) const {
    float out[N];
#pragma unroll
    for (int i = 0; i < N; ++i)
      out[i] = log ? (v[i] == -INFINITY ? -INFINITY : v[i] - shift) : v[i] * mul;
    store_pack<T, N>(y + row * cols + col, out);
  }
};

// A max that keeps exp(v - max) finite for fully masked rows (which give zeros / -inf).
__device__ __forceinline__ float safe_max(float m) { return m == -INFINITY ? 0.f : m; }
__device__ __forceinline__ float inv_or_zero(float sum) { return sum > 0.f ? 1.f / sum : 0.f; }

template <typename T, class Load, class Store, int N, int kCols, int kGroup, int kRows>
__global__ void __launch_bounds__(kWarpThreads) softmax_warp_kernel(Load load, Store store,
                                                                    int64_t rows, int64_t cols) {
  pdl_prologue();
  constexpr int kPacks = kCols / N;
  float buf[kRows][kCols];
  const int lane = threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.y * kRows;
  // Loop bound on the warp's first row: all groups of a warp iterate together (full-mask
  // shuffles); rows past the end are masked inside.
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
        if (row0 + r < rows && col < cols) load.raw(buf[r] + p * N, row0 + r, col);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int valid = row0 + r < rows ? load.valid(row0 + r) : 0;
      float max_v = -INFINITY;
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int col = (p * kGroup + lane) * N;
        load.transform(buf[r] + p * N, col, valid);  // padding columns become -inf
#pragma unroll
        for (int i = 0; i < N; ++i) max_v = fmaxf(max_v, buf[r][p * N + i]);
      }
      max_v = safe_max(group_allreduce<kGroup>(max_v, MaxOp()));
      float sum = 0.f;
      if (store.log) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) sum += kernel_exp<T>(buf[r][c] - max_v);
      } else {
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          buf[r][c] = kernel_exp<T>(buf[r][c] - max_v);
          sum += buf[r][c];
        }
      }
      sum = group_allreduce<kGroup>(sum, SumOp());
      if (row0 + r >= rows) continue;
      const float shift = max_v + logf(sum), mul = inv_or_zero(sum);
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int64_t col = (int64_t(p) * kGroup + lane) * N;
        if (col < cols) store(buf[r] + p * N, row0 + r, col, shift, mul);
      }
    }
  }
}

// Online softmax statistics: the running max m and the sum s of exp(v - m), fed one pack at a
// time (one exp per element, plus a rescale when the pack raises the max).
template <typename T>
struct OnlineMaxSum {
  float m = -INFINITY, s = 0.f;
  template <int N>
  __device__ __forceinline__ void add_pack(const float* v) {
    float pm = v[0];
#pragma unroll
    for (int i = 1; i < N; ++i) pm = fmaxf(pm, v[i]);
    if (pm == -INFINITY) return;  // fully masked pack
    if (pm > m) {
      s *= kernel_exp<T>(m - pm);  // m = -inf: s is 0 and stays 0
      m = pm;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) s += kernel_exp<T>(v[i] - m);
  }
  __device__ __forceinline__ void merge(float om, float os) {
    if (om == -INFINITY) return;
    if (om > m) {
      s = s * kernel_exp<T>(m - om) + os;
      m = om;
    } else {
      s += os * kernel_exp<T>(om - m);
    }
  }
};

template <typename T>
__device__ void block_allreduce(OnlineMaxSum<T>& st) {
  __shared__ float s_m[32], s_s[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int mask = 16; mask > 0; mask /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, st.m, mask);
    const float os = __shfl_xor_sync(0xffffffffu, st.s, mask);
    st.merge(om, os);
  }
  if (lane == 0) {
    s_m[warp] = st.m;
    s_s[warp] = st.s;
  }
  __syncthreads();
  OnlineMaxSum<T> t;
  if (lane < int(blockDim.x / 32)) {
    t.m = s_m[lane];
    t.s = s_s[lane];
  }
#pragma unroll
  for (int mask = 16; mask > 0; mask /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, t.m, mask);
    const float os = __shfl_xor_sync(0xffffffffu, t.s, mask);
    t.merge(om, os);
  }
  st = t;
  __syncthreads();  // s_m / s_s are reused by the next row
}

// One block per row cached in shared memory, column-interleaved (element i of pack p at
// i * num_packs + p: consecutive lanes hit consecutive banks). C = float caches the scaled,
// masked values; C = T caches the raw input (exact, half the bytes: more blocks per SM for
// wide rows) and re-applies scale and mask when reading it back. Two passes: online max/sum
// while caching, then the outputs.
template <typename T, typename C, class Load, class Store, int N>
__global__ void softmax_smem_kernel(Load load, Store store, int64_t rows, int64_t cols) {
  pdl_prologue();
  constexpr bool kRawCache = !std::is_same<C, float>::value;
  extern __shared__ __align__(16) unsigned char softmax_smem_raw[];
  C* cache = reinterpret_cast<C*>(softmax_smem_raw);
  const int num_packs = int(cols / N);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int valid = load.valid(row);
    OnlineMaxSum<T> st;
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
      load.raw(v, row, int64_t(p) * N);
      if (kRawCache) {
#pragma unroll
        for (int i = 0; i < N; ++i) cache[i * num_packs + p] = from_float<C>(v[i]);
      }
      load.transform(v, p * N, valid);
      if (!kRawCache) {
#pragma unroll
        for (int i = 0; i < N; ++i) cache[i * num_packs + p] = v[i];
      }
      st.template add_pack<N>(v);
    }
    block_allreduce(st);
    const float max_v = safe_max(st.m);
    const float shift = max_v + logf(st.s), mul = inv_or_zero(st.s);
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = to_float(cache[i * num_packs + p]);
      if (kRawCache) load.transform(v, p * N, valid);
      if (!store.log) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = kernel_exp<T>(v[i] - max_v);
      }
      store(v, row, int64_t(p) * N, shift, mul);
    }
    __syncthreads();  // the cache is overwritten by the next row
  }
}

// One block per row, two passes over global memory (online max/sum, then the outputs).
template <typename T, class Load, class Store, int N>
__global__ void __launch_bounds__(1024) softmax_uncached_kernel(Load load, Store store,
                                                                int64_t rows, int64_t cols) {
  pdl_prologue();
  const int num_packs = int(cols / N);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int valid = load.valid(row);
    OnlineMaxSum<T> st;
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
      load.raw(v, row, int64_t(p) * N);
      load.transform(v, p * N, valid);
      st.template add_pack<N>(v);
    }
    block_allreduce(st);
    const float max_v = safe_max(st.m);
    const float shift = max_v + logf(st.s), mul = inv_or_zero(st.s);
    for (int p = threadIdx.x; p < num_packs; p += blockDim.x) {
      float v[N];
      load.raw(v, row, int64_t(p) * N);
      load.transform(v, p * N, valid);
      if (!store.log) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = kernel_exp<T>(v[i] - max_v);
      }
      store(v, row, int64_t(p) * N, shift, mul);
    }
  }
}

template <typename T, int N>
struct SmKernels {
  using Load = SmLoad<T, N>;
  using Store = SmStore<T, N>;
  Load load;
  Store store;
  int64_t rows, cols;

  template <int kCols, int kGroup, int kRows>
  const void* warp_kernel() const {
    return reinterpret_cast<const void*>(
        &softmax_warp_kernel<T, Load, Store, N, kCols, kGroup, kRows>);
  }
  template <int kCols, int kGroup, int kRows>
  void launch_warp(dim3 grid, dim3 block, cudaStream_t s) const {
    launch(&softmax_warp_kernel<T, Load, Store, N, kCols, kGroup, kRows>, grid, block, 0, s, load, store,
           rows, cols);
  }
  // Rows up to 16384 columns cache float (the transformed values: no re-scaling on read, and
  // still three or more blocks per SM); wider rows cache the raw T to keep blocks resident.
  bool raw_cache() const { return sizeof(T) < sizeof(float) && cols > 16384; }
  size_t smem_bytes() const { return size_t(cols) * (raw_cache() ? sizeof(T) : sizeof(float)); }
  const void* smem_kernel() const {
    return raw_cache()
               ? reinterpret_cast<const void*>(&softmax_smem_kernel<T, T, Load, Store, N>)
               : reinterpret_cast<const void*>(&softmax_smem_kernel<T, float, Load, Store, N>);
  }
  void launch_smem(dim3 grid, dim3 block, size_t smem, cudaStream_t s) const {
    if (raw_cache())
      launch(&softmax_smem_kernel<T, T, Load, Store, N>, grid, block, smem, s, load, store, rows, cols);
    else
      launch(&softmax_smem_kernel<T, float, Load, Store, N>, grid, block, smem, s, load, store, rows, cols);
  }
  const void* uncached_kernel() const {
    return reinterpret_cast<const void*>(&softmax_uncached_kernel<T, Load, Store, N>);
  }
  void launch_uncached(dim3 grid, dim3 block, cudaStream_t s) const {
    launch(&softmax_uncached_kernel<T, Load, Store, N>, grid, block, 0, s, load, store, rows, cols);
  }
};

template <typename T, int N>
void run(const T* x, T* y, int64_t rows, int64_t cols, const SoftmaxOptions& opt,
         cudaStream_t stream) {
  using K = SmKernels<T, N>;
  const K k{{x, cols, opt.scale, opt.key_lengths, opt}, {y, cols, opt.log}, rows, cols};
  dispatch_rowwise<K, N>(k, rows, cols, stream);
}

}  // namespace
}  // namespace cuda

template <typename T>
void softmax_cuda(const T* x, T* y, int64_t rows, int64_t cols, const SoftmaxOptions& opt,
                  cudaStream_t stream) {
  constexpr int kFull = 16 / int(sizeof(T));
  if (cuda::pick_pack<T>(cols, {x, y}) == kFull)
    cuda::run<T, kFull>(x, y, rows, cols, opt, stream);
  else
    cuda::run<T, 1>(x, y, rows, cols, opt, stream);
}

#define NMT_INSTANTIATE(T)                                                                     \
  template void softmax_cuda<T>(const T*, T*, int64_t, int64_t, const SoftmaxOptions&,         \
                                cudaStream_t);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
NMT_INSTANTIATE(__nv_bfloat16)
#undef NMT_INSTANTIATE

}  // namespace nmt::kernels
