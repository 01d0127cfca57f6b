// Kernel microbenchmarks, timed with CUDA events around back-to-back launches (median of 7
// repetitions). Output: CSV rows "bench,param,variant,us,GBps" on stdout, a readable summary
// on stderr. The cuBLAS baselines are measured in the same program.
//
//   nmt-bench-kernels [--quick]
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/layer_norm.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"

using namespace nmt::kernels;

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define CHECK_CUBLAS(x)                                                       \
  do {                                                                        \
    if ((x) != CUBLAS_STATUS_SUCCESS) {                                       \
      std::fprintf(stderr, "%s:%d %s failed\n", __FILE__, __LINE__, #x);      \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

namespace {

cudaStream_t g_stream;

// Microseconds per call: median over 7 repetitions of `iters` back-to-back calls.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One repetition: microseconds per call over `iters` back-to-back calls.
double time_once_us(const std::function<void()>& f, int iters) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, g_stream));
  for (int i = 0; i < iters; ++i) f();
  CHECK(cudaEventRecord(b, g_stream));
  CHECK(cudaEventSynchronize(b));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return 1000.0 * ms / iters;
}

double time_us(const std::function<void()>& f, int iters) {
  time_once_us(f, 3);  // warm-up (lazy module loading, clocks)
  std::vector<double> reps;
  for (int r = 0; r < 7; ++r) reps.push_back(time_once_us(f, iters));
  return median(reps);
}

// A kernel and its baseline, repetitions interleaved so that both see the same clocks.
std::pair<double, double> time_pair_us(const std::function<void()>& f,
                                       const std::function<void()>& g, int iters) {
  time_once_us(f, iters);
  time_once_us(g, iters);
  std::vector<double> rf, rg;
  for (int r = 0; r < 7; ++r) {
    rf.push_back(time_once_us(f, iters));
    rg.push_back(time_once_us(g, iters));
  }
  return {median(rf), median(rg)};
}

__global__ void fill_kernel(__half* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2half(float(h & 0xffff) / 65536.f * 4.f - 2.f);
  }
}
__global__ void fill_kernel(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = float(h & 0xffff) / 65536.f * 4.f - 2.f;
  }
}

template <typename T>
T* alloc_random(size_t n, uint32_t seed) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, n * sizeof(T)));
  fill_kernel<<<1024, 256, 0, g_stream>>>(p, n, seed);
  CHECK(cudaGetLastError());
  return p;
}

void row(const char* bench, long param, const char* variant, double us, double gbps) {
  std::printf("%s,%ld,%s,%.3f,%.1f\n", bench, param, variant, us, gbps);
  std::fflush(stdout);
}

double copy_bandwidth() {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  const double us =
      time_us([&] { CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g_stream)); }, 10);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  const double gbps = 2.0 * bytes / us / 1e3;  // bytes read + written
  row("copy", long(bytes), "cudaMemcpyAsync-D2D", us, gbps);
  return gbps;
}

void bench_rowwise(bool quick, double copy_gbps) {
  const int64_t rows = 49152, max_cols = quick ? 4096 : 32768;
  __half* x = alloc_random<__half>(size_t(rows) * max_cols, 1);
  __half* y = nullptr;
  CHECK(cudaMalloc(&y, size_t(rows) * max_cols * sizeof(__half)));
  __half* gamma = alloc_random<__half>(size_t(max_cols), 2);
  __half* beta = alloc_random<__half>(size_t(max_cols), 3);
  std::fprintf(stderr, "%-8s %7s %10s %9s %8s\n", "op", "C", "us", "GB/s", "of copy");
  for (int64_t cols = 32; cols <= max_cols; cols *= 2) {
    const double bytes = 2.0 * rows * cols * sizeof(__half);
    const int iters = cols <= 1024 ? 50 : 10;
    const double ln = time_us(
        [&] {
          layer_norm_cuda<__half>(x, nullptr, nullptr, gamma, beta, y, rows, cols, 1e-5f,
                                  g_stream);
        },
        iters);
    row("layernorm_fp16", long(cols), "ours", ln, bytes / ln / 1e3);
    std::fprintf(stderr, "%-8s %7ld %10.2f %9.1f %7.1f%%\n", "LN", long(cols), ln,
                 bytes / ln / 1e3, 100.0 * bytes / ln / 1e3 / copy_gbps);
    SoftmaxOptions opt;
    const double sm =
        time_us([&] { softmax_cuda<__half>(x, y, rows, cols, opt, g_stream); }, iters);
    row("softmax_fp16", long(cols), "ours", sm, bytes / sm / 1e3);
    std::fprintf(stderr, "%-8s %7ld %10.2f %9.1f %7.1f%%\n", "softmax", long(cols), sm,
                 bytes / sm / 1e3, 100.0 * bytes / sm / 1e3 / copy_gbps);
  }
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  CHECK(cudaFree(gamma));
  CHECK(cudaFree(beta));
}

cublasHandle_t g_cublas;

template <typename T>
cudaDataType_t dtype() {
  return sizeof(T) == 2 ? CUDA_R_16F : CUDA_R_32F;
}

// Decoder step, 16 sentences x 4 beams x 8 heads, head_dim 64, cache length L:
//   fused: one attention_cuda launch over the [batch, max_len, heads, 64] cache;
//   baseline: the heads-major cache [batch, heads, max_len, 64] (the best layout for cuBLAS)
//   with one strided-batched QK^T, our masked softmax and one strided-batched PV.
void bench_decoder_step() {
  using T = __half;
  const int64_t batch = 64, heads = 8, d = 64, max_len = 128, hd = heads * d;
  T* q = alloc_random<T>(size_t(batch * hd), 4);
  T* k = alloc_random<T>(size_t(batch * max_len * hd), 5);
  T* v = alloc_random<T>(size_t(batch * max_len * hd), 6);
  T *out = nullptr, *scores = nullptr;
  CHECK(cudaMalloc(&out, size_t(batch * hd) * sizeof(T)));
  CHECK(cudaMalloc(&scores, size_t(batch * heads * max_len) * sizeof(T)));
  std::fprintf(stderr, "\ndecoder step (64 x 8 heads x 64, fp16)\n%4s %10s %12s %7s\n", "L",
               "fused us", "cuBLAS us", "speedup");
  for (int64_t len : {8, 17, 32, 64}) {
    AttentionArgs<T> a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = out;
    a.batch = batch;
    a.heads = int(heads);
    a.head_dim = int(d);
    a.q_len = 1;
    a.kv_len = len;
    a.q_batch_stride = a.q_row_stride = a.out_batch_stride = a.out_row_stride = hd;
    a.kv_batch_stride = max_len * hd;
    a.kv_row_stride = hd;
    a.scale = 0.125f;
    a.causal = true;
    a.causal_offset = len - 1;
    a.path = AttentionPath::kDecoderStep;
    const float alpha = 0.125f, one = 1.f, zero = 0.f;
    SoftmaxOptions opt;
    auto fused_fn = [&] { attention_cuda(a, g_stream); };
    auto base_fn = [&] {
          // S[bh] (1 x L) = q_bh K_bh^T: K_bh is d x L column-major (ld d), q_bh d x 1
          CHECK_CUBLAS(cublasGemmStridedBatchedEx(
              g_cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(len), 1, int(d), &alpha, k, CUDA_R_16F,
              int(d), max_len * d, q, CUDA_R_16F, int(d), d, &zero, scores, CUDA_R_16F,
              int(len), len, int(batch * heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          softmax_cuda<T>(scores, scores, batch * heads, len, opt, g_stream);
          // out_bh (d x 1) = V_bh (d x L) P_bh (L x 1)
          CHECK_CUBLAS(cublasGemmStridedBatchedEx(
              g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, int(d), 1, int(len), &one, v, CUDA_R_16F,
              int(d), max_len * d, scores, CUDA_R_16F, int(len), len, &zero, out, CUDA_R_16F,
              int(d), d, int(batch * heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    const auto [fused, base] = time_pair_us(fused_fn, base_fn, 200);
    row("decoder_step_fp16", long(len), "fused", fused, 0);
    row("decoder_step_fp16", long(len), "cublas+softmax+cublas", base, 0);
    std::fprintf(stderr, "%4ld %10.2f %12.2f %6.2fx\n", long(len), fused, base, base / fused);
  }
  for (T* p : {q, k, v, out, scores}) CHECK(cudaFree(p));
}

// [b, len, heads, d] -> [b, heads, len, d], one 16-byte pack per thread.
template <typename T>
__global__ void split_heads(const T* src, T* dst, int64_t b, int64_t len, int64_t heads,
                            int64_t d) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t packs = b * len * heads * d / kVec;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = p * kVec;
    const int64_t dd = e % d, h = e / d % heads, i = e / d / heads % len, bb = e / d / heads / len;
    *reinterpret_cast<uint4*>(dst + ((bb * heads + h) * len + i) * d + dd) =
        *reinterpret_cast<const uint4*>(src + e);
  }
}

// Q.K^T for 512 (batch 64 x 8 heads) products of 17 x 17 x d, inputs in [b, len, heads, d].
template <typename T>
void bench_qk(int64_t d) {
  const int64_t b = 64, heads = 8, len = 17, n = b * len * heads * d;
  T* q = alloc_random<T>(size_t(n), 7);
  T* k = alloc_random<T>(size_t(n), 8);
  T *qt, *kt, *s;
  CHECK(cudaMalloc(&qt, n * sizeof(T)));
  CHECK(cudaMalloc(&kt, n * sizeof(T)));
  CHECK(cudaMalloc(&s, size_t(b * heads * len * len) * sizeof(T)));
  AttentionArgs<T> a;
  a.q = q;
  a.k = k;
  a.batch = b;
  a.heads = int(heads);
  a.head_dim = int(d);
  a.q_len = a.kv_len = len;
  a.q_row_stride = a.kv_row_stride = heads * d;
  a.q_batch_stride = a.kv_batch_stride = len * heads * d;
  a.scale = 1.f / 8.f;
  auto ours_fn = [&] { attention_scores_cuda(a, s, g_stream); };
  const float alpha = 0.125f, zero = 0.f;
  auto gemm = [&] {
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(
        g_cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(len), int(len), int(d), &alpha, kt, dtype<T>(),
        int(d), len * d, qt, dtype<T>(), int(d), len * d, &zero, s, dtype<T>(), int(len),
        len * len, int(b * heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  const double gemm_only = time_us(gemm, 200);
  auto baseline_fn = [&] {
    split_heads<<<1024, 256, 0, g_stream>>>(q, qt, b, len, heads, d);
    split_heads<<<1024, 256, 0, g_stream>>>(k, kt, b, len, heads, d);
    gemm();
  };
  const auto [ours, with_transposes] = time_pair_us(ours_fn, baseline_fn, 200);
  const char* name = sizeof(T) == 2 ? "qk_17x17_fp16" : "qk_17x17_fp32";
  row(name, long(d), "ours", ours, 0);
  row(name, long(d), "cublas+transposes", with_transposes, 0);
  row(name, long(d), "cublas-gemm-only", gemm_only, 0);
  std::fprintf(stderr,
               "\nQ.K^T 512 x (17 x 17 x %ld) %s: ours %.2f us, cuBLAS %.2f us + transposes = "
               "%.2f us (%.2fx)\n",
               long(d), sizeof(T) == 2 ? "fp16" : "fp32", ours, gemm_only, with_transposes,
               with_transposes / ours);
  for (T* p : {q, k, qt, kt, s}) CHECK(cudaFree(p));
}

// Returns us per call of beam_topk_cuda<T> on sentences x beam rows of vocab logits, with the
// logits rows padded to a multiple of 8 when padded (as the CUDA engine lays them out).
template <typename T>
double time_topk(int64_t sentences, int beam, int vocab, bool padded) {
  const int k = 2 * beam;
  const int64_t stride = padded ? (vocab + 7) / 8 * 8 : vocab;
  T* logits = alloc_random<T>(size_t(sentences * beam * stride), 9);
  float* bias = alloc_random<float>(size_t(vocab), 10);
  float* running = alloc_random<float>(size_t(sentences * beam), 11);
  float* scores;
  int* index;
  CHECK(cudaMalloc(&scores, sentences * k * sizeof(float)));
  CHECK(cudaMalloc(&index, sentences * k * sizeof(int)));
  const size_t ws_bytes = beam_topk_workspace_bytes(sentences, beam, vocab, k);
  void* ws;
  CHECK(cudaMalloc(&ws, ws_bytes));
  TopkMasks masks;
  masks.pad_id = vocab - 1;
  const double us = time_us(
      [&] {
        beam_topk_cuda<T>(logits, bias, running, sentences, beam, vocab, k, masks, scores, index,
                          ws, ws_bytes, g_stream, stride);
      },
      200);
  CHECK(cudaFree(logits));
  CHECK(cudaFree(bias));
  CHECK(cudaFree(running));
  CHECK(cudaFree(scores));
  CHECK(cudaFree(index));
  CHECK(cudaFree(ws));
  return us;
}

void bench_topk() {
  const int64_t sentences = 16;
  const int beam = 4, vocab = 58101;
  const double us = time_topk<__half>(sentences, beam, vocab, false);
  row("beam_topk_fp16", vocab, "ours", us, 2.0 * sentences * beam * vocab / us / 1e3);
  std::fprintf(stderr, "\nbeam top-k 16 x 4 x %d, k = 8 (log-softmax + masks + top-k): %.2f us\n",
               vocab, us);
  // The CUDA engine's batch-1 and batch-64 decode steps: float32 logits, rows padded to 8.
  for (int64_t n : {1, 64})
    for (int v : {8001, 58101})
      std::fprintf(stderr, "beam top-k %ld x 4 x %d float32, k = 8 (engine batch %ld): %.2f us\n",
                   long(n), v, long(n), time_topk<float>(n, 4, v, true));
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  CHECK(cudaStreamCreate(&g_stream));
  CHECK_CUBLAS(cublasCreate(&g_cublas));
  CHECK_CUBLAS(cublasSetStream(g_cublas, g_stream));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::fprintf(stderr, "device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("bench,param,variant,us,GBps\n");
  const double copy = copy_bandwidth();
  std::fprintf(stderr, "device-to-device copy: %.1f GB/s (read + write)\n", copy);
  bench_rowwise(quick, copy);
  bench_decoder_step();
  bench_qk<__half>(64);
  bench_qk<float>(128);
  bench_topk();
  CHECK_CUBLAS(cublasDestroy(g_cublas));
  return 0;
}
