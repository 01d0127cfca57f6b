#pragma once
// The three-way row-wise dispatch shared by LayerNorm and Softmax (OneFlow's design):
//   cols <= 1024        : a group of 1..32 lanes per row, the row in registers
//   row fits in smem    : one block per row, the row cached in shared memory
//   otherwise           : one block per row, re-reading global memory
// A Kernels object holds one call's arguments and launches, for one operation and pack N:
//   template <int kCols, int kGroup, int kRows> const void* warp_kernel() const
//   template <int kCols, int kGroup, int kRows> void launch_warp(grid, block, stream) const
//   size_t smem_bytes() const; const void* smem_kernel() const;
//   void launch_smem(grid, block, smem, stream) const
//   const void* uncached_kernel() const; void launch_uncached(grid, block, stream) const
#include <algorithm>
#include <map>
#include <tuple>

#include "kernels/cuda/common.cuh"

namespace nmt::kernels::cuda {

constexpr int kWarpThreads = 128;  // threads per block of the warp-per-row kernels

// Columns per thread of the register kernels: multiples of the pack N up to 32, coarser
// steps above 8 when N < 4 to bound the number of instantiations (padding covers the rest).
template <int N, int C>
constexpr int next_cols_per_thread() {
  return (N >= 4 || C < 8) ? C + N : C + 4;
}

// Occupancy of a kernel (blocks per SM) on the current device, queried once per thread and
// configuration: the grids below are exactly what the GPU holds at once (each block loops over
// rows), so no partial last wave idles part of the machine.
inline int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  thread_local std::map<std::tuple<const void*, int, size_t, int>, int> cache;
  int dev = 0;
  NMT_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(kernel, threads, smem, dev);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int active = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, kernel, threads, smem) !=
      cudaSuccess) {
    cudaGetLastError();
    active = 0;
  }
  cache.emplace(key, active);
  return active;
}

// min(blocks the work needs, `waves` x blocks resident at once). The register kernels run
// persistent (one wave, each group looping over rows). The block-per-row kernels get four
// waves: on H100, (49152, 2048..8192) fp16 rows ran slower both with one wave (a persistent
// block waits on its own next row) and with one row per block (2048 gained, 8192 lost 25%).
inline dim3 resident_grid(const void* kernel, int threads, size_t smem, int64_t needed,
                          int waves = 1) {
  const int64_t resident =
      int64_t(std::max(blocks_per_sm(kernel, threads, smem), 1)) * num_sms() * waves;
  return dim3(unsigned(std::max<int64_t>(1, std::min(needed, resident))));
}

template <class Kernels, int N, int kCols>
void dispatch_warp_cols(const Kernels& k, int64_t cols, int64_t rows, cudaStream_t stream) {
  if constexpr (kCols <= 32) {
    if (cols <= int64_t(kCols) * 32) {
      const dim3 block(32, kWarpThreads / 32);
      const void* kernel = k.template warp_kernel<kCols, 32, 1>();
      const int64_t needed = (rows + block.y - 1) / block.y;
      k.template launch_warp<kCols, 32, 1>(resident_grid(kernel, kWarpThreads, 0, needed), block,
                                           stream);
      return;
    }
    dispatch_warp_cols<Kernels, N, next_cols_per_thread<N, kCols>()>(k, cols, rows, stream);
  }
}

template <class Kernels, int N, int kGroup>
void dispatch_warp_group(const Kernels& k, int64_t cols, int64_t rows, cudaStream_t stream) {
  if constexpr (kGroup < 32) {
    if (cols <= int64_t(N) * kGroup) {  // one pack per lane, two rows per group
      const dim3 block(kGroup, kWarpThreads / kGroup);
      const void* kernel = k.template warp_kernel<N, kGroup, 2>();
      const int64_t needed = (rows + 2 * block.y - 1) / (2 * block.y);
      k.template launch_warp<N, kGroup, 2>(resident_grid(kernel, kWarpThreads, 0, needed), block,
                                           stream);
      return;
    }
    dispatch_warp_group<Kernels, N, kGroup * 2>(k, cols, rows, stream);
  } else {
    dispatch_warp_cols<Kernels, N, N>(k, cols, rows, stream);
  }
}

// OneFlow's rule: the largest block size with the same occupancy (blocks, i.e. rows in flight,
// per SM) as 128 threads; 0 when the row does not fit in shared memory. Exception: 64 threads
// when that keeps at least 1.5x the rows in flight (rows of a few thousand columns are
// latency-bound: on H100 this took (49152, 2048) fp16 LayerNorm from 74% to 85% of copy
// bandwidth, while 64 threads at 13 vs 12 rows in flight lost 20% at 8192).
inline int pick_smem_block(const void* kernel, size_t smem) {
  const int base = blocks_per_sm(kernel, 128, smem);
  if (base <= 0) return 0;
  if (2 * blocks_per_sm(kernel, 64, smem) >= 3 * base) return 64;
  int best = 128;
  for (int threads : {256, 512, 1024}) {
    if (blocks_per_sm(kernel, threads, smem) < base) break;
    best = threads;
  }
  return best;
}

// Raises the kernel's dynamic shared memory limit to smem; false when the device cannot.
inline bool allow_smem(const void* kernel, size_t smem) {
  thread_local std::map<std::pair<const void*, int>, size_t> allowed;
  int dev = 0, optin = 0;
  NMT_CUDA_CHECK(cudaGetDevice(&dev));
  size_t& current = allowed[{kernel, dev}];
  if (smem <= std::max<size_t>(current, 48 * 1024)) return true;
  NMT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (smem > size_t(optin)) return false;
  NMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
  current = smem;
  return true;
}

template <class Kernels, int N>
void dispatch_rowwise(const Kernels& k, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (cols <= 1024) {
    dispatch_warp_group<Kernels, N, 1>(k, cols, rows, stream);
    return;
  }
  const size_t smem = k.smem_bytes();
  const void* smem_kernel = k.smem_kernel();
  if (allow_smem(smem_kernel, smem)) {
    const int threads = pick_smem_block(smem_kernel, smem);
    if (threads > 0) {
      k.launch_smem(resident_grid(smem_kernel, threads, smem, rows, 4), dim3(threads), smem,
                    stream);
      return;
    }
  }
  k.launch_uncached(resident_grid(k.uncached_kernel(), 1024, 0, rows, 4), dim3(1024), stream);
}

}  // namespace nmt::kernels::cuda
