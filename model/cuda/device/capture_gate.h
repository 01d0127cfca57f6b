#pragma once
// CUDA graph captures and the calls that wait for the whole device, kept apart. A capture
// (graph_cache.cc) records a decode step on a stream for many milliseconds; a call in another
// thread that synchronizes the device or changes its memory mappings (cudaMalloc, cudaFree,
// cudaDeviceSynchronize, a synchronous cudaMemcpy, cuMemMap / cuMemUnmap, cublasDestroy)
// meanwhile invalidates that capture, and the step then fails ("operation failed due to a
// previous error during capture", cuBLAS errors): a model loading or unloading beside the
// running ones did so (docs/kernels.md, "How the CUDA engine uses them"). Captures share the gate; those calls hold it
// alone. Both are rare after warm-up (graphs are cached per shape, buffers cached), so a
// capture or an allocation waits at most for the other's few milliseconds.
#include <mutex>
#include <shared_mutex>

namespace nmt::cuda {

// Held for the length of one stream capture (BeginCapture .. EndCapture).
class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  std::shared_lock<std::shared_mutex> lock_;
};

// Held around a call that would invalidate another thread's capture. In the capturing thread
// itself it takes nothing (such a call there is CUDA's error, as it was, not a deadlock).
class DeviceWideScope {
 public:
  DeviceWideScope();
  DeviceWideScope(const DeviceWideScope&) = delete;
  DeviceWideScope& operator=(const DeviceWideScope&) = delete;

 private:
  std::unique_lock<std::shared_mutex> lock_;
};

}  // namespace nmt::cuda
