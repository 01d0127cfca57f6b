#pragma once
// Launch timeline (recorded in builds configured with -DNMT_CUDA_TRACE=ON only): block (0,0,0)
// of every kernel of ours notes, in pdl_prologue(), when it reached griddepcontrol.wait and when
// the wait released it. A kernel is released when the kernel before it on the stream has
// finished, so the gaps between consecutive releases are what each kernel adds to a decode
// step's chain, measured inside the step's CUDA graph (ncu can only time a kernel alone). The
// slot is taken with an atomic before the wait, off the chain. Each translation unit keeps its
// own ring (no relocatable device code); nmt::kernels::trace_dump() merges them by time.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#ifndef NMT_CUDA_TRACE
#define NMT_CUDA_TRACE 0
#endif

namespace nmt::kernels::cuda {

struct TraceRecord {
  uint64_t wait;     // globaltimer (ns) when block 0 reached the wait
  uint64_t release;  // globaltimer (ns) when the wait returned
  uint32_t line;     // source line of the pdl_prologue() call
  uint32_t blocks;   // grid size
};
constexpr uint32_t kTraceCapacity = 1u << 17;

using TraceReader = cudaError_t (*)(std::vector<TraceRecord>&);
struct TraceSource {
  const char* file;
  TraceReader read;
};
inline std::vector<TraceSource>& trace_sources() {
  static std::vector<TraceSource> sources;
  return sources;
}

#if NMT_CUDA_TRACE
namespace {
__device__ TraceRecord g_trace[kTraceCapacity];
__device__ uint32_t g_trace_count;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool trace_block() {
  return threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
}

__device__ __forceinline__ uint32_t trace_wait(uint32_t line) {
  const uint32_t slot = atomicAdd(&g_trace_count, 1u) % kTraceCapacity;
  g_trace[slot].wait = global_ns();
  g_trace[slot].line = line;
  g_trace[slot].blocks = gridDim.x * gridDim.y * gridDim.z;
  return slot;
}

__device__ __forceinline__ void trace_release(uint32_t slot) { g_trace[slot].release = global_ns(); }

cudaError_t read_trace(std::vector<TraceRecord>& out) {
  uint32_t n = 0;
  if (const cudaError_t e = cudaMemcpyFromSymbol(&n, g_trace_count, sizeof(n)); e != cudaSuccess) return e;
  const uint32_t kept = n < kTraceCapacity ? n : kTraceCapacity;
  const size_t at = out.size();
  out.resize(at + kept);
  return cudaMemcpyFromSymbol(out.data() + at, g_trace, kept * sizeof(TraceRecord));
}

const bool g_trace_registered = (trace_sources().push_back({__BASE_FILE__, &read_trace}), true);
}  // namespace
#endif

}  // namespace nmt::kernels::cuda
