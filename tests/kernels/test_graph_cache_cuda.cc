// The CUDA engine's graph cache (model/cuda/device/graph_cache.h) keeps at most kMaxGraphs
// graphs: a key first seen once the cache is full runs as plain launches, with the same
// effect, and the cache neither captures nor remembers it. Each key's work here is one memset
// of its own byte, so the buffer shows that every launch, plain or replayed, did its work.
#include "tests/kernels/cuda_test_util.h"

#if NMT_WITH_CUDA
#include <cublas_v2.h>

#include "model/cuda/device/graph_cache.h"

namespace nmt::cuda {
namespace {

TEST(GraphCacheCuda, KeepsAtMostTheBoundAndRunsNewKeysPlainOnceFull) {
  NMT_SKIP_WITHOUT_GPU();
  constexpr int kKeys = int(GraphCache::kMaxGraphs) + 40;
  DeviceQueue q;
  cudaStream_t capture_stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&q.stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cublasCreate(&q.cublas), CUBLAS_STATUS_SUCCESS);
  unsigned char* bytes = nullptr;
  ASSERT_EQ(cudaMalloc(&bytes, kKeys), cudaSuccess);
  GraphCache cache;
  // Pass p sets every key's byte to p + 1: pass 0 runs each key plain (first seen), pass 1
  // captures while the cache has room, pass 2 replays the captured ones.
  for (int pass = 0; pass < 3; ++pass) {
    for (int k = 0; k < kKeys; ++k) {
      launch(cache, {k}, true, q, capture_stream,
             [&] { ASSERT_EQ(cudaMemsetAsync(bytes + k, pass + 1, 1, q.stream), cudaSuccess); });
    }
    std::vector<unsigned char> host(kKeys);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), bytes, kKeys, cudaMemcpyDeviceToHost, q.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(q.stream), cudaSuccess);
    // A replayed graph sets the byte of the pass it was captured in (its memset's value).
    for (int k = 0; k < kKeys; ++k) {
      const int want = pass == 2 && k < int(GraphCache::kMaxGraphs) ? 2 : pass + 1;
      EXPECT_EQ(int(host[size_t(k)]), want) << "pass " << pass << ", key " << k;
    }
    EXPECT_EQ(cache.graphs.size(), pass == 0 ? 0 : GraphCache::kMaxGraphs) << "pass " << pass;
  }
  EXPECT_TRUE(cache.full());
  // Keys met past the bound run plain and are not remembered: the set stays bounded too.
  EXPECT_EQ(cache.seen.size(), size_t(kKeys));
  launch(cache, {kKeys}, true, q, capture_stream,
         [&] { ASSERT_EQ(cudaMemsetAsync(bytes, 9, 1, q.stream), cudaSuccess); });
  EXPECT_EQ(cache.seen.size(), size_t(kKeys));
  EXPECT_EQ(cache.graphs.size(), GraphCache::kMaxGraphs);
  ASSERT_EQ(cudaStreamSynchronize(q.stream), cudaSuccess);
  cache.clear();
  cudaFree(bytes);
  cublasDestroy(q.cublas);
  cudaStreamDestroy(capture_stream);
  cudaStreamDestroy(q.stream);
}

}  // namespace
}  // namespace nmt::cuda
#else
NMT_CUDA_TESTS_COMPILED_OUT(GraphCacheCuda)
#endif
