// return_alignments' kernel (kernels/attention.h, attention_argmax_cuda): per decoder row that
// asks, the key its cross-attention weighs most, averaged over the heads. One block per row;
// launched only in steps where a sentence asks, so the other steps are untouched.
#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"

namespace nmt::kernels {
namespace cuda {
namespace {

constexpr int kArgmaxThreads = 128;

// The (value, index) of the larger, the lower index on equal values (torch.argmax's first).
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

template <typename T>
__global__ void __launch_bounds__(kArgmaxThreads)
    attention_argmax_kernel(AttentionArgs<T> a, const unsigned char* wanted, int* argmax) {
  pdl_prologue();
  const int64_t b = blockIdx.x;
  if (!wanted[b]) {  // a row of a sentence that does not ask (or padding)
    if (threadIdx.x == 0) argmax[b] = -1;
    return;
  }
  extern __shared__ float smem[];
  float* mean = smem;            // [kv_len]: the sum over heads of each key's probability
  float* score = smem + a.kv_len;  // [kv_len]: the current head's scores, then exps
  const int64_t kv = a.kv_index ? a.kv_index[b] : b / a.queries_per_kv;
  int64_t n = a.kv_len;
  if (a.key_lengths) n = min(n, int64_t(a.key_lengths[kv]));
  const int64_t start = a.kv_starts ? int64_t(a.kv_starts[kv]) * a.kv_row_stride : kv * a.kv_batch_stride;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mean[j] = 0.f;
  for (int h = 0; h < a.heads; ++h) {
    const int64_t hd = int64_t(h) * a.head_dim;
    const T* q = a.q + b * a.q_batch_stride + hd;
    float local_max = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const T* k = a.k + start + j * a.kv_row_stride + hd;
      float dot = 0.f;
      for (int c = 0; c < a.head_dim; ++c) {
        // as the attention kernels load it: (q + bias) * scale
        const float qc = (to_float(q[c]) + (a.q_bias ? to_float(a.q_bias[hd + c]) : 0.f)) * a.scale;
        dot += qc * to_float(k[c]);
      }
      score[j] = dot;
      local_max = fmaxf(local_max, dot);
    }
    const float max_s = block_allreduce(local_max, MaxOp(), -INFINITY);
    float local_sum = 0.f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      score[j] = expf(score[j] - max_s);
      local_sum += score[j];
    }
    const float sum = block_allreduce(local_sum, SumOp(), 0.f);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mean[j] += score[j] / sum;
    __syncthreads();
  }
  float best_v = -INFINITY;
  int best_i = int(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) better(best_v, best_i, mean[j], int(j));
  for (int mask = 16; mask > 0; mask /= 2)
    better(best_v, best_i, __shfl_xor_sync(0xffffffffu, best_v, mask), __shfl_xor_sync(0xffffffffu, best_i, mask));
  __shared__ float warp_v[kArgmaxThreads / 32];
  __shared__ int warp_i[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) {
    warp_v[threadIdx.x / 32] = best_v;
    warp_i[threadIdx.x / 32] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) better(best_v, best_i, warp_v[w], warp_i[w]);
    argmax[b] = n > 0 ? best_i : -1;
  }
}

}  // namespace
}  // namespace cuda

template <typename T>
void attention_argmax_cuda(const AttentionArgs<T>& a, const unsigned char* wanted, int* argmax, cudaStream_t stream) {
  if (a.batch <= 0) return;
  if (a.q_len != 1) throw std::invalid_argument("attention_argmax_cuda: one query per row (q_len 1)");
  cuda::launch(cuda::attention_argmax_kernel<T>, dim3(unsigned(a.batch)), dim3(cuda::kArgmaxThreads),
               2 * sizeof(float) * size_t(a.kv_len), stream, a, wanted, argmax);
}

#define NMT_INSTANTIATE(T) \
  template void attention_argmax_cuda<T>(const AttentionArgs<T>&, const unsigned char*, int*, cudaStream_t);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
#undef NMT_INSTANTIATE

}  // namespace nmt::kernels
