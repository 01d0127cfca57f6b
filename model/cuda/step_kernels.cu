#include "model/cuda/step_kernels.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "model/error.h"

namespace nmt::cuda {
namespace {

constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error(ErrorCode::kInternal, std::string("CUDA launch of ") + what + " failed: " +
                                          cudaGetErrorString(status));
}

// ---------------------------------------------------------------- embeddings, KV cache

template <typename T>
__global__ void embed_kernel(const int* ids, const T* emb, const T* pos, const int* step,
                             int seq_len, T* out, int d, float scale) {
  const int r = blockIdx.x;
  const int p = step ? *step : r % seq_len;
  const T* e = emb + int64_t(ids[r]) * d;
  const T* q = pos + int64_t(p) * d;
  T* o = out + int64_t(r) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) o[c] = from_f<T>(to_f(e[c]) * scale + to_f(q[c]));
}

__global__ void update_key_rows_kernel(const int* old_rows, int* new_rows, const int* parent,
                                       int capacity, const int* step) {
  const int r = blockIdx.x, t = *step;
  const int* src = old_rows + int64_t(parent[r]) * capacity;
  int* dst = new_rows + int64_t(r) * capacity;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) dst[j] = j < t ? src[j] : r;
}

// ---------------------------------------------------------------- attention

constexpr int kAttnWarps = 4;

template <typename T>
__device__ __forceinline__ float dot_row(const float* q, const T* k, int hd) {
  constexpr int V = 16 / sizeof(T);
  float s = 0.f;
  for (int c = 0; c < hd; c += V) {
    const uint4 raw = *reinterpret_cast<const uint4*>(k + c);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int u = 0; u < V; ++u) s += q[c + u] * to_f(e[u]);
  }
  return s;
}

template <typename T>
__global__ void attention_kernel(AttentionParams<T> p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kAttnWarps + warp;
  const int64_t total = int64_t(p.batches) * p.q_len * p.heads;
  if (item >= total) return;
  const int hd = p.head_dim;
  const int h = int(item % p.heads);
  const int64_t qr = item / p.heads;
  const int b = int(qr / p.q_len);
  float* qs = smem + warp * (hd + p.max_keys);
  float* ps = qs + hd;
  const int kb = p.kv_index ? p.kv_index[b] : b;
  int n = p.key_lengths ? p.key_lengths[kb] : *p.step + 1;
  n = min(n, p.max_keys);

  const T* qrow = p.q + qr * p.q_ld + h * hd;
  for (int c = lane; c < hd; c += 32) {
    float x = to_f(qrow[c]);
    if (p.q_bias) x += to_f(p.q_bias[h * hd + c]);
    qs[c] = x * p.scale;
  }
  __syncwarp();
  const T* kbase = p.k + kb * p.kv_batch_stride + h * hd;
  const T* vbase = p.v + kb * p.kv_batch_stride + h * hd;
  float mx = kNegInf;
  for (int j = lane; j < n; j += 32) {
    const float s = dot_row(qs, kbase + j * p.kv_ld, hd);
    ps[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < n; j += 32) {
    const float e = __expf(ps[j] - mx);
    ps[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  const float inv = n > 0 ? 1.f / sum : 0.f;
  T* orow = p.out + qr * p.out_ld + h * hd;
  for (int c = lane; c < hd; c += 32) {
    float a0 = 0.f, a1 = 0.f;
    const T* vc = vbase + c;
    int j = 0;
    for (; j + 1 < n; j += 2) {
      a0 += ps[j] * to_f(vc[j * p.kv_ld]);
      a1 += ps[j + 1] * to_f(vc[(j + 1) * p.kv_ld]);
    }
    if (j < n) a0 += ps[j] * to_f(vc[j * p.kv_ld]);
    float acc = (a0 + a1) * inv;
    if (p.v_bias && n > 0) acc += to_f(p.v_bias[h * hd + c]);
    orow[c] = from_f<T>(acc);
  }
}

template <typename T>
__global__ void decoder_self_attention_kernel(DecoderSelfAttention<T> p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (item >= int64_t(p.rows) * p.heads) return;
  const int hd = p.head_dim, h = int(item % p.heads), r = int(item / p.heads);
  const int d = p.heads * hd, t = *p.step, n = t + 1;
  float* qs = smem + warp * (hd + 2 * p.capacity);
  float* ps = qs + hd;
  int* rows_s = reinterpret_cast<int*>(ps + p.capacity);
  const int64_t row_stride = int64_t(p.capacity) * d;
  const T* src = p.qkv + int64_t(r) * 3 * d + h * hd;
  const T* bias = p.bias + h * hd;
  T* k_new = p.k_cache + r * row_stride + int64_t(t) * d + h * hd;
  T* v_new = p.v_cache + r * row_stride + int64_t(t) * d + h * hd;
  for (int c = lane; c < hd; c += 32) {
    qs[c] = (to_f(src[c]) + to_f(bias[c])) * p.scale;
    k_new[c] = from_f<T>(to_f(src[d + c]) + to_f(bias[d + c]));
    v_new[c] = from_f<T>(to_f(src[2 * d + c]) + to_f(bias[2 * d + c]));
  }
  __syncwarp();
  const int* key_rows = p.key_rows + int64_t(r) * p.capacity;
  const T* kbase = p.k_cache + h * hd;
  const T* vbase = p.v_cache + h * hd;
  float mx = kNegInf;
  for (int j = lane; j < n; j += 32) {
    const int kr = key_rows[j];
    rows_s[j] = kr;
    const float s = dot_row(qs, kbase + kr * row_stride + int64_t(j) * d, hd);
    ps[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < n; j += 32) {
    const float e = __expf(ps[j] - mx);
    ps[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  const float inv = 1.f / sum;
  T* orow = p.out + int64_t(r) * d + h * hd;
  for (int c = lane; c < hd; c += 32) {
    float a[4] = {0.f, 0.f, 0.f, 0.f};
    int j = 0;
    for (; j + 3 < n; j += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u)
        a[u] += ps[j + u] * to_f(vbase[rows_s[j + u] * row_stride + int64_t(j + u) * d + c]);
    }
    for (; j < n; ++j) a[0] += ps[j] * to_f(vbase[rows_s[j] * row_stride + int64_t(j) * d + c]);
    orow[c] = from_f<T>((a[0] + a[1] + a[2] + a[3]) * inv);
  }
}

// ---------------------------------------------------------------- skinny GEMM

constexpr int kSkinnyWarps = 4;

template <typename T, typename TC>
__global__ void skinny_gemm_kernel(const T* x, int64_t ldx, const T* w, TC* y, int64_t ldy,
                                   int M, int N, int K) {
  constexpr int V = 16 / sizeof(T);
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kSkinnyWarps + threadIdx.x / 32;
  if (n >= N) return;
  const T* wr = w + int64_t(n) * K;
  float acc[kSkinnyRows];
#pragma unroll
  for (int m = 0; m < kSkinnyRows; ++m) acc[m] = 0.f;
#pragma unroll 4
  for (int k = lane * V; k < K; k += 32 * V) {
    const uint4 wv = *reinterpret_cast<const uint4*>(wr + k);
    const T* we = reinterpret_cast<const T*>(&wv);
    float wf[V];
#pragma unroll
    for (int u = 0; u < V; ++u) wf[u] = to_f(we[u]);
#pragma unroll
    for (int m = 0; m < kSkinnyRows; ++m) {
      if (m < M) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x + m * ldx + k);
        const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
        for (int u = 0; u < V; ++u) acc[m] += wf[u] * to_f(xe[u]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kSkinnyRows; ++m) {
    if (m < M) {
      const float v = warp_sum(acc[m]);
      if (lane == m) y[m * ldy + n] = from_f<TC>(v);
    }
  }
}

// ---------------------------------------------------------------- LayerNorm, activation

constexpr int kLnWarps = 4;
constexpr int kLnMaxPerLane = 32;  // cols <= 1024

template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* res, const T* bias, const T* gamma,
                                  const T* beta, T* y, int rows, int cols, float eps) {
  const int row = blockIdx.x * kLnWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t off = int64_t(row) * cols;
  float v[kLnMaxPerLane];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kLnMaxPerLane; ++i) {
    const int c = lane + i * 32;
    v[i] = 0.f;
    if (c < cols) {
      float z = to_f(x[off + c]);
      if (res) z += to_f(res[off + c]);
      if (bias) z += to_f(bias[c]);
      v[i] = z;
      sum += z;
    }
  }
  const float mean = warp_sum(sum) / cols;
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < kLnMaxPerLane; ++i) {
    const int c = lane + i * 32;
    if (c < cols) sq += (v[i] - mean) * (v[i] - mean);
  }
  const float rstd = rsqrtf(warp_sum(sq) / cols + eps);
#pragma unroll
  for (int i = 0; i < kLnMaxPerLane; ++i) {
    const int c = lane + i * 32;
    if (c < cols) y[off + c] = from_f<T>((v[i] - mean) * rstd * to_f(gamma[c]) + to_f(beta[c]));
  }
}

template <typename T>
__global__ void bias_activation_kernel(T* x, const T* bias, int64_t n, int cols,
                                       kernels::Activation act) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = to_f(x[i]);
    if (bias) v += to_f(bias[i % cols]);
    switch (act) {
      case kernels::Activation::kRelu: v = fmaxf(v, 0.f); break;
      case kernels::Activation::kGelu: v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); break;
      case kernels::Activation::kSwish: v = v / (1.f + __expf(-v)); break;
    }
    x[i] = from_f<T>(v);
  }
}

template <typename T>
__global__ void convert_kernel(const float* src, T* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f<T>(src[i]);
}

// ---------------------------------------------------------------- beam top-k

constexpr int kTopkThreads = 256;
constexpr int kNoToken = INT_MAX;

struct Lse {
  float m, s;
};
__device__ __forceinline__ Lse lse_merge(Lse a, Lse b) {
  if (a.m == kNegInf) return b;
  if (b.m == kNegInf) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}
// (value desc, token asc)
__device__ __forceinline__ bool better(float va, int ta, float vb, int tb) {
  return va > vb || (va == vb && ta < tb);
}

// Stage 1: one block per (row, vocabulary chunk): the chunk's (max, sum exp) and its KP best
// selectable tokens by raw logit (the row's log-softmax shift does not change the order).
template <int KP>
__global__ void topk_chunks_kernel(const float* logits, const float* bias, int vocab, int splits,
                                   int chunk, int pad_id, int eos_id, bool mask_eos,
                                   bool force_eos, float* stats, float* vals, int* toks) {
  __shared__ float s_vals[kTopkThreads * KP];
  __shared__ int s_toks[kTopkThreads * KP];
  __shared__ float s_red_v[kTopkThreads / 32];
  __shared__ int s_red_t[kTopkThreads / 32];
  __shared__ int s_red_owner[kTopkThreads / 32];
  __shared__ Lse s_lse[kTopkThreads / 32];
  __shared__ int s_winner;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int row = blockIdx.x / splits, split = blockIdx.x % splits;
  const int begin = split * chunk, end = min(vocab, begin + chunk);
  const float* x = logits + int64_t(row) * vocab;

  float v[KP];
  int t[KP];
#pragma unroll
  for (int i = 0; i < KP; ++i) { v[i] = kNegInf; t[i] = kNoToken; }
  Lse acc{kNegInf, 0.f};
  for (int tok = begin + tid; tok < end; tok += kTopkThreads) {
    const float z = x[tok] + (bias ? bias[tok] : 0.f);
    if (z > acc.m) { acc.s = acc.s * __expf(acc.m - z) + 1.f; acc.m = z; }
    else acc.s += __expf(z - acc.m);
    const bool selectable = tok != pad_id && !(mask_eos && tok == eos_id) &&
                            !(force_eos && tok != eos_id);
    if (selectable && z > v[KP - 1]) {
      v[KP - 1] = z;
      t[KP - 1] = tok;
#pragma unroll
      for (int i = KP - 1; i > 0; --i) {
        if (v[i] > v[i - 1]) {
          const float fv = v[i]; v[i] = v[i - 1]; v[i - 1] = fv;
          const int ft = t[i]; t[i] = t[i - 1]; t[i - 1] = ft;
        }
      }
    }
  }
  // log-sum-exp of the chunk
  for (int o = 16; o > 0; o /= 2) {
    Lse other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
    acc = lse_merge(acc, other);
  }
  if (lane == 0) s_lse[warp] = acc;
#pragma unroll
  for (int i = 0; i < KP; ++i) { s_vals[tid * KP + i] = v[i]; s_toks[tid * KP + i] = t[i]; }
  __syncthreads();
  if (tid == 0) {
    Lse all = s_lse[0];
    for (int w = 1; w < kTopkThreads / 32; ++w) all = lse_merge(all, s_lse[w]);
    stats[2 * blockIdx.x] = all.m;
    stats[2 * blockIdx.x + 1] = all.s;
  }
  // KP rounds of block argmax over the threads' sorted lists
  int head = 0;
  for (int r = 0; r < KP; ++r) {
    float bv = head < KP ? s_vals[tid * KP + head] : kNegInf;
    int bt = head < KP ? s_toks[tid * KP + head] : kNoToken;
    int owner = tid;
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int ot = __shfl_xor_sync(0xffffffffu, bt, o);
      const int oo = __shfl_xor_sync(0xffffffffu, owner, o);
      if (better(ov, ot, bv, bt) || (ov == bv && ot == bt && oo < owner)) { bv = ov; bt = ot; owner = oo; }
    }
    if (lane == 0) { s_red_v[warp] = bv; s_red_t[warp] = bt; s_red_owner[warp] = owner; }
    __syncthreads();
    if (tid == 0) {
      int w_best = 0;
      for (int w = 1; w < kTopkThreads / 32; ++w)
        if (better(s_red_v[w], s_red_t[w], s_red_v[w_best], s_red_t[w_best])) w_best = w;
      vals[int64_t(blockIdx.x) * KP + r] = s_red_v[w_best];
      toks[int64_t(blockIdx.x) * KP + r] = s_red_t[w_best];
      s_winner = s_red_owner[w_best];
    }
    __syncthreads();
    if (tid == s_winner) ++head;
    __syncthreads();
  }
}

// Stage 2: one warp per sentence merges its beam x splits x KP candidates into the k best.
__global__ void topk_merge_kernel(const float* stats, const float* vals, const int* toks,
                                  const float* running, int beam, int vocab, int splits, int kp,
                                  int k, float* out_scores,
                                  int* out_index) {
  extern __shared__ float smem[];
  const int g = blockIdx.x, lane = threadIdx.x;
  const int n = beam * splits * kp;
  float* cv = smem;
  int* ci = reinterpret_cast<int*>(cv + n);
  float* row_lse = reinterpret_cast<float*>(ci + n);
  int* picked = reinterpret_cast<int*>(row_lse + beam);
  for (int b = lane; b < beam; b += 32) {
    const int64_t row = int64_t(g) * beam + b;
    Lse all{kNegInf, 0.f};
    for (int s = 0; s < splits; ++s)
      all = lse_merge(all, Lse{stats[2 * (row * splits + s)], stats[2 * (row * splits + s) + 1]});
    row_lse[b] = all.m + logf(all.s);
  }
  __syncwarp();
  for (int i = lane; i < n; i += 32) {
    const int b = i / (splits * kp);
    const int64_t row = int64_t(g) * beam + b;
    const int64_t src = row * splits * kp + i % (splits * kp);
    const int tok = toks[src];
    if (tok == kNoToken || vals[src] == kNegInf) {
      cv[i] = kNegInf;
      ci[i] = INT_MAX;  // not a candidate; fillers are assigned below
    } else {
      const float logp = vals[src] - row_lse[b];
      cv[i] = logp + running[row];
      ci[i] = b * vocab + tok;
    }
  }
  __syncwarp();
  for (int r = 0; r < k; ++r) {
    float bv = kNegInf;
    int bi = INT_MAX, bpos = -1;
    for (int i = lane; i < n; i += 32) {
      if (ci[i] != INT_MAX && (bpos < 0 || better(cv[i], ci[i], bv, bi))) { bv = cv[i]; bi = ci[i]; bpos = i; }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      const int op = __shfl_xor_sync(0xffffffffu, bpos, o);
      if (op >= 0 && (bpos < 0 || better(ov, oi, bv, bi))) { bv = ov; bi = oi; bpos = op; }
    }
    if (lane == 0) {
      if (bpos >= 0 && bv != kNegInf) {
        ci[bpos] = INT_MAX;
      } else {
        // Only -inf left: like a stable sort, the lowest indices not yet returned.
        bv = kNegInf;
        bi = 0;
        for (bool again = true; again;) {
          again = false;
          for (int q = 0; q < r; ++q)
            if (picked[q] == bi) { ++bi; again = true; }
        }
      }
      picked[r] = bi;
      out_scores[int64_t(g) * k + r] = bv;
      out_index[int64_t(g) * k + r] = bi;
    }
    __syncwarp();
  }
}

int padded_k(int k) {
  int p = 4;
  while (p < k) p *= 2;
  return p;
}

template <typename T>
void attention_launch(const AttentionParams<T>& p, cudaStream_t stream) {
  if (p.head_dim % 8 != 0 || p.q_ld % 8 != 0 || p.kv_ld % 8 != 0)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: head_dim and model width must be multiples of 8");
  const int64_t total = int64_t(p.batches) * p.q_len * p.heads;
  if (total == 0) return;
  const size_t smem = size_t(kAttnWarps) * (p.head_dim + p.max_keys) * sizeof(float);
  attention_kernel<T><<<unsigned((total + kAttnWarps - 1) / kAttnWarps), kAttnWarps * 32, smem,
                        stream>>>(p);
  check_launch("attention");
}

}  // namespace

template <typename T>
void embed(const int* ids, const T* emb, const T* pos, const int* step, int seq_len, T* out,
           int rows, int d, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  embed_kernel<T><<<rows, std::min(d, 256), 0, stream>>>(ids, emb, pos, step, seq_len, out, d, scale);
  check_launch("embed");
}

void update_key_rows(const int* old_rows, int* new_rows, const int* parent, int rows,
                     int capacity, const int* step, cudaStream_t stream) {
  if (rows == 0) return;
  update_key_rows_kernel<<<rows, 64, 0, stream>>>(old_rows, new_rows, parent, capacity, step);
  check_launch("update_key_rows");
}

template <typename T>
void decoder_self_attention(const DecoderSelfAttention<T>& p, cudaStream_t stream) {
  if (p.head_dim % 8 != 0)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: head_dim must be a multiple of 8");
  const int64_t total = int64_t(p.rows) * p.heads;
  if (total == 0) return;
  const size_t smem = size_t(kAttnWarps) * (p.head_dim + 2 * p.capacity) * sizeof(float);
  decoder_self_attention_kernel<T><<<unsigned((total + kAttnWarps - 1) / kAttnWarps),
                                     kAttnWarps * 32, smem, stream>>>(p);
  check_launch("decoder_self_attention");
}

template <typename T, typename TC>
void skinny_gemm(const T* x, int64_t ldx, const T* w, TC* y, int64_t ldy, int M, int N, int K,
                 cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  if (M > kSkinnyRows || K % V || ldx % V)
    throw Error(ErrorCode::kInternal, "skinny_gemm: unsupported shape");
  if (M == 0 || N == 0) return;
  skinny_gemm_kernel<T, TC><<<(N + kSkinnyWarps - 1) / kSkinnyWarps, kSkinnyWarps * 32, 0,
                              stream>>>(x, ldx, w, y, ldy, M, N, K);
  check_launch("skinny_gemm");
}

template <typename T>
void attention(const AttentionParams<T>& p, cudaStream_t stream) {
  attention_launch(p, stream);
}

template <typename T>
void layer_norm(const T* x, const T* residual, const T* bias, const T* gamma, const T* beta,
                T* y, int rows, int cols, float eps, cudaStream_t stream) {
  if (cols > 32 * kLnMaxPerLane)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: d_model > 1024 is not supported");
  if (rows == 0) return;
  layer_norm_kernel<T><<<(rows + kLnWarps - 1) / kLnWarps, kLnWarps * 32, 0, stream>>>(
      x, residual, bias, gamma, beta, y, rows, cols, eps);
  check_launch("layer_norm");
}

template <typename T>
void bias_activation(T* x, const T* bias, int rows, int cols, kernels::Activation act,
                     cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  if (n == 0) return;
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 4096));
  bias_activation_kernel<T><<<blocks, 256, 0, stream>>>(x, bias, n, cols, act);
  check_launch("bias_activation");
}

template <typename T>
void convert_from_float(const float* src, T* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 4096));
  convert_kernel<T><<<blocks, 256, 0, stream>>>(src, dst, n);
  check_launch("convert");
}

int topk_splits(int rows, int vocab) {
  const int want = (528 + rows - 1) / std::max(rows, 1);
  const int most = std::max(1, std::min(vocab / 2048, 64));
  return std::clamp(want, 1, most);
}

static int topk_merge_splits(const TopkShape& s) {
  // The merge keeps beam x splits x KP candidates in shared memory: at most 4096 of them.
  int splits = topk_splits(s.sentences * s.beam, s.vocab);
  while (splits > 1 && s.beam * splits * padded_k(s.k) > 4096) --splits;
  return splits;
}

size_t topk_workspace_bytes(const TopkShape& s) {
  const int64_t blocks = int64_t(s.sentences) * s.beam * topk_merge_splits(s);
  return size_t(blocks) * (2 * sizeof(float) + size_t(padded_k(s.k)) * (sizeof(float) + sizeof(int)));
}

void beam_topk(const float* logits, const float* bias, const float* running_scores,
               const TopkShape& s, float* out_scores, int* out_index, void* workspace,
               cudaStream_t stream) {
  if (s.k > kMaxTopk || s.k > s.beam * s.vocab)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: top-k larger than supported");
  if (s.sentences == 0) return;
  const int rows = s.sentences * s.beam;
  const int splits = topk_merge_splits(s);
  const int chunk = (s.vocab + splits - 1) / splits;
  const int kp = padded_k(s.k);
  const int64_t blocks = int64_t(rows) * splits;
  float* stats = static_cast<float*>(workspace);
  float* vals = stats + 2 * blocks;
  int* toks = reinterpret_cast<int*>(vals + blocks * kp);
#define NMT_TOPK_CASE(KP)                                                                      \
  case KP:                                                                                     \
    topk_chunks_kernel<KP><<<unsigned(blocks), kTopkThreads, 0, stream>>>(                     \
        logits, bias, s.vocab, splits, chunk, s.pad_id, s.eos_id, s.mask_eos, s.force_eos,     \
        stats, vals, toks);                                                                    \
    break;
  switch (kp) {
    NMT_TOPK_CASE(4)
    NMT_TOPK_CASE(8)
    NMT_TOPK_CASE(16)
    default: throw Error(ErrorCode::kInternal, "beam_topk: bad k");
  }
#undef NMT_TOPK_CASE
  check_launch("topk_chunks");
  const int n = s.beam * splits * kp;
  const size_t smem = size_t(n) * (sizeof(float) + sizeof(int)) + s.beam * sizeof(float) +
                      size_t(s.k) * sizeof(int);
  topk_merge_kernel<<<s.sentences, 32, smem, stream>>>(stats, vals, toks, running_scores, s.beam,
                                                       s.vocab, splits, kp, s.k, out_scores,
                                                       out_index);
  check_launch("topk_merge");
}

#define NMT_INSTANTIATE(T)                                                                       \
  template void embed<T>(const int*, const T*, const T*, const int*, int, T*, int, int, float,   \
                         cudaStream_t);                                                          \
  template void decoder_self_attention<T>(const DecoderSelfAttention<T>&, cudaStream_t);         \
  template void skinny_gemm<T, T>(const T*, int64_t, const T*, T*, int64_t, int, int, int,       \
                                  cudaStream_t);                                                 \
  template void attention<T>(const AttentionParams<T>&, cudaStream_t);                           \
  template void layer_norm<T>(const T*, const T*, const T*, const T*, const T*, T*, int, int,    \
                              float, cudaStream_t);                                              \
  template void bias_activation<T>(T*, const T*, int, int, kernels::Activation, cudaStream_t);   \
  template void convert_from_float<T>(const float*, T*, int64_t, cudaStream_t);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
#undef NMT_INSTANTIATE
template void skinny_gemm<__half, float>(const __half*, int64_t, const __half*, float*, int64_t,
                                         int, int, int, cudaStream_t);

}  // namespace nmt::cuda
