#include "model/cuda/device/graph_cache.h"

#include "model/cuda/device/capture_gate.h"
#include "model/cuda/device/device_memory.h"

namespace nmt::cuda {
namespace {

cudaGraphExec_t capture(DeviceQueue& q, cudaStream_t capture_stream, const std::function<void()>& enqueue) {
  const CaptureScope no_device_wide_calls;  // capture_gate.h
  cudaGraph_t graph = nullptr;
  const cudaStream_t shared = q.stream;
  auto end_capture = [&] {
    const cudaError_t status = cudaStreamEndCapture(capture_stream, &graph);
    q.stream = shared;
    cublasSetStream(q.cublas, q.stream);
    return status;
  };
  check_cuda(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal), "graph capture");
  q.stream = capture_stream;
  try {
    check_cublas(cublasSetStream(q.cublas, q.stream), "cublasSetStream");
    enqueue();
  } catch (...) {
    end_capture();
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check_cuda(end_capture(), "graph capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(status, "cudaGraphInstantiate");
  return exec;
}

}  // namespace

void launch(GraphCache& cache, const GraphKey& key, bool use_graphs, DeviceQueue& q,
            cudaStream_t capture_stream, const std::function<void()>& enqueue) {
  if (!use_graphs) return enqueue();
  auto it = cache.graphs.find(key);
  if (it == cache.graphs.end()) {
    if (cache.full() || cache.seen.insert(key).second) return enqueue();
    it = cache.graphs.emplace(key, capture(q, capture_stream, enqueue)).first;
  }
  check_cuda(cudaGraphLaunch(it->second, q.stream), "cudaGraphLaunch");
}

}  // namespace nmt::cuda
