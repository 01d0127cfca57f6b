#pragma once
// Captured CUDA graphs of the engine's steps and encodes, by key, and the stream and cuBLAS
// handle its launches go to (DeviceQueue): the shared stream, the encode stream, or the
// private capture stream while a graph is captured.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <set>
#include <vector>

namespace nmt::cuda {

// Where the engine's code enqueues: a stream and the cuBLAS handle bound to it.
struct DeviceQueue {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // int8 weights: where the projections of more rows than the int8 GEMV takes dequantize
  // their weights for cuBLAS, in float16 (model/cuda/layers.h). A queue's own: the encode and
  // the steps run at once on their two streams.
  void* int8_scratch = nullptr;
  int64_t int8_scratch_elements = 0;
};

// Captured graphs of one kind by key. A key's first use runs plain (lazy module loading,
// cuBLAS heuristics); it is captured the next time. At most kMaxGraphs are kept: an encode's
// key is its exact sentence count with its padded length, hundreds of them under a mixed
// load, and every executable graph holds host and device memory for its nodes, so without a
// bound an engine's memory would grow with each new shape the load brings (docs/kernels.md).
// Once the cache is full a new key runs plain, and is not remembered either.
using GraphKey = std::vector<int>;
struct GraphCache {
  static constexpr size_t kMaxGraphs = 256;
  std::map<GraphKey, cudaGraphExec_t> graphs;
  std::set<GraphKey> seen;  // keys run once without a graph
  bool full() const { return graphs.size() >= kMaxGraphs; }
  void clear() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
    graphs.clear();
  }
};

// `enqueue`'s work on q.stream: the graph of `key` when captured, else plain launches
// (always plain when !use_graphs). A capture runs on `capture_stream` (the shared stream may
// get other engines' work while this one captures) with q pointing at it, and is replayed
// on q's own stream.
void launch(GraphCache& cache, const GraphKey& key, bool use_graphs, DeviceQueue& q,
            cudaStream_t capture_stream, const std::function<void()>& enqueue);

}  // namespace nmt::cuda
