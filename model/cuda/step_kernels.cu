#include "model/cuda/step_kernels.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

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
//
// One warp per (query, head). Every global load of a loop body is issued before its first use
// (head size as a template parameter, 16-byte chunks, unrolled key loops): these kernels are
// latency-bound, and a load waited for per iteration costs a memory round trip each.

constexpr int kAttnWarps = 4;

template <typename T>
__device__ __forceinline__ uint4 load16(const T* p) { return *reinterpret_cast<const uint4*>(p); }

// q[0:HD] (shared, float) . k[0:HD]
template <typename T, int HD>
__device__ __forceinline__ float dot_row(const float* q, const T* k) {
  constexpr int V = 16 / sizeof(T);
  uint4 raw[HD / V];
#pragma unroll
  for (int c = 0; c < HD / V; ++c) raw[c] = load16(k + c * V);
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < HD / V; ++c) {
    const T* e = reinterpret_cast<const T*>(&raw[c]);
#pragma unroll
    for (int u = 0; u < V; ++u) s += q[c * V + u] * to_f(e[u]);
  }
  return s;
}

// sum_j ps[j] * value_row(j)[0:HD] over j < n, for the whole warp: lane = group * kChunks +
// chunk; each group takes every kGroups-th key, each chunk 16 bytes of the row; the groups'
// partial sums are added by shuffles. Lanes < kChunks end with the result of their chunk.
template <typename T, int HD, typename RowFn>
__device__ __forceinline__ void weighted_values(const float* ps, int n, int lane, RowFn value_row,
                                                float (&acc)[16 / sizeof(T)]) {
  constexpr int V = 16 / sizeof(T), kChunks = HD / V, kGroups = 32 / kChunks;
  static_assert(kChunks <= 32 && 32 % kChunks == 0, "head size");
  const int g = lane / kChunks, q = lane % kChunks;
#pragma unroll
  for (int u = 0; u < V; ++u) acc[u] = 0.f;
  int j = g;
  for (; j + 3 * kGroups < n; j += 4 * kGroups) {
    uint4 r[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) r[w] = load16(value_row(j + w * kGroups) + q * V);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const T* e = reinterpret_cast<const T*>(&r[w]);
      const float pj = ps[j + w * kGroups];
#pragma unroll
      for (int u = 0; u < V; ++u) acc[u] += pj * to_f(e[u]);
    }
  }
  for (; j < n; j += kGroups) {
    const uint4 r = load16(value_row(j) + q * V);
    const T* e = reinterpret_cast<const T*>(&r);
    const float pj = ps[j];
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] += pj * to_f(e[u]);
  }
#pragma unroll
  for (int o = kChunks; o < 32; o *= 2) {
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], o);
  }
}

// Lanes < kChunks write their chunk: out[0:HD] = acc * scale (+ bias).
template <typename T, int HD>
__device__ __forceinline__ void store_head(T* out, const float (&acc)[16 / sizeof(T)], float scale,
                                           const T* bias, int lane) {
  constexpr int V = 16 / sizeof(T), kChunks = HD / V;
  if (lane >= kChunks) return;
  alignas(16) T o[V];
#pragma unroll
  for (int u = 0; u < V; ++u)
    o[u] = from_f<T>(acc[u] * scale + (bias ? to_f(bias[lane * V + u]) : 0.f));
  *reinterpret_cast<uint4*>(out + lane * V) = *reinterpret_cast<const uint4*>(o);
}

// Softmax numerators of ps[0:n] in place; returns 1 / their sum.
__device__ __forceinline__ float softmax_in_place(float* ps, int n, float mx, int lane) {
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j < n; j += 32) {
    const float e = __expf(ps[j] - mx);
    ps[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  __syncwarp();
  return n > 0 ? 1.f / sum : 0.f;
}

template <typename T, int HD>
__global__ void attention_kernel(AttentionParams<T> p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kAttnWarps + warp;
  const int64_t total = int64_t(p.batches) * p.q_len * p.heads;
  if (item >= total) return;
  const int h = int(item % p.heads);
  const int64_t qr = item / p.heads;
  const int b = int(qr / p.q_len);
  float* qs = smem + warp * (HD + p.max_keys);
  float* ps = qs + HD;
  const int kb = p.kv_index ? p.kv_index[b] : b;
  int n = p.key_lengths ? p.key_lengths[kb] : *p.step + 1;
  n = min(n, p.max_keys);

  const T* qrow = p.q + qr * p.q_ld + h * HD;
#pragma unroll
  for (int c = lane; c < HD; c += 32)
    qs[c] = (to_f(qrow[c]) + (p.q_bias ? to_f(p.q_bias[h * HD + c]) : 0.f)) * p.scale;
  __syncwarp();
  const T* kbase = p.k + kb * p.kv_batch_stride + h * HD;
  const T* vbase = p.v + kb * p.kv_batch_stride + h * HD;
  float mx = kNegInf;
  for (int j = lane; j < n; j += 32) {
    const float s = dot_row<T, HD>(qs, kbase + j * p.kv_ld);
    ps[j] = s;
    mx = fmaxf(mx, s);
  }
  const float inv = softmax_in_place(ps, n, mx, lane);
  float acc[16 / sizeof(T)];
  weighted_values<T, HD>(ps, n, lane, [&](int j) { return vbase + j * p.kv_ld; }, acc);
  store_head<T, HD>(p.out + qr * p.out_ld + h * HD, acc, inv,
                    p.v_bias && n > 0 ? p.v_bias + h * HD : nullptr, lane);
}

template <typename T, int HD>
__global__ void decoder_self_attention_kernel(DecoderSelfAttention<T> p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kAttnWarps + warp;
  if (item >= int64_t(p.rows) * p.heads) return;
  const int h = int(item % p.heads), r = int(item / p.heads);
  const int d = p.heads * HD, t = *p.step, n = t + 1;
  float* qs = smem + warp * (HD + 2 * p.capacity);
  float* ps = qs + HD;
  int* rows_s = reinterpret_cast<int*>(ps + p.capacity);
  const int64_t row_stride = int64_t(p.capacity) * d;
  const T* src = p.qkv + int64_t(r) * 3 * d + h * HD;
  const T* bias = p.bias + h * HD;
  T* k_new = p.k_cache + r * row_stride + int64_t(t) * d + h * HD;
  T* v_new = p.v_cache + r * row_stride + int64_t(t) * d + h * HD;
#pragma unroll
  for (int c = lane; c < HD; c += 32) {
    qs[c] = (to_f(src[c]) + to_f(bias[c])) * p.scale;
    k_new[c] = from_f<T>(to_f(src[d + c]) + to_f(bias[d + c]));
    v_new[c] = from_f<T>(to_f(src[2 * d + c]) + to_f(bias[2 * d + c]));
  }
  __syncwarp();  // the new key/value are read back by other lanes below
  const int* key_rows = p.key_rows + int64_t(r) * p.capacity;
  const T* kbase = p.k_cache + h * HD;
  const T* vbase = p.v_cache + h * HD;
  float mx = kNegInf;
  for (int j = lane; j < n; j += 32) {
    const int kr = key_rows[j];
    rows_s[j] = kr;
    const float s = dot_row<T, HD>(qs, kbase + kr * row_stride + int64_t(j) * d);
    ps[j] = s;
    mx = fmaxf(mx, s);
  }
  const float inv = softmax_in_place(ps, n, mx, lane);  // its __syncwarp publishes rows_s too
  float acc[16 / sizeof(T)];
  weighted_values<T, HD>(ps, n, lane,
                         [&](int j) { return vbase + rows_s[j] * row_stride + int64_t(j) * d; }, acc);
  store_head<T, HD>(p.out + int64_t(r) * d + h * HD, acc, inv, nullptr, lane);
}

// ---------------------------------------------------------------- LayerNorm, activation

constexpr int kLnWarps = 4;
constexpr int kLnMaxCols = 1024;

// One warp per row, the row in registers; all loads of a pass issued before their use.
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* res, const T* bias, const T* gamma,
                                  const T* beta, T* y, int rows, int cols, float eps) {
  constexpr int V = 16 / sizeof(T), C = kLnMaxCols / (32 * V);
  const int row = blockIdx.x * kLnWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t off = int64_t(row) * cols;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 xr[C], rr[C], br[C];
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = (lane + i * 32) * V;
    xr[i] = rr[i] = br[i] = zero;
    if (c < cols) {
      xr[i] = load16(x + off + c);
      if (res) rr[i] = load16(res + off + c);
      if (bias) br[i] = load16(bias + c);
    }
  }
  float v[C * V];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const T* a = reinterpret_cast<const T*>(&xr[i]);
    const T* b = reinterpret_cast<const T*>(&rr[i]);
    const T* e = reinterpret_cast<const T*>(&br[i]);
#pragma unroll
    for (int u = 0; u < V; ++u) {
      v[i * V + u] = to_f(a[u]) + to_f(b[u]) + to_f(e[u]);
      sum += v[i * V + u];
    }
  }
  const float mean = warp_sum(sum) / cols;
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    if ((lane + i * 32) * V < cols) {
#pragma unroll
      for (int u = 0; u < V; ++u) sq += (v[i * V + u] - mean) * (v[i * V + u] - mean);
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / cols + eps);
  uint4 gr[C], be[C];
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = (lane + i * 32) * V;
    gr[i] = be[i] = zero;
    if (c < cols) {
      gr[i] = load16(gamma + c);
      be[i] = load16(beta + c);
    }
  }
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = (lane + i * 32) * V;
    if (c < cols) {
      const T* g = reinterpret_cast<const T*>(&gr[i]);
      const T* b = reinterpret_cast<const T*>(&be[i]);
      alignas(16) T o[V];
#pragma unroll
      for (int u = 0; u < V; ++u)
        o[u] = from_f<T>((v[i * V + u] - mean) * rstd * to_f(g[u]) + to_f(b[u]));
      *reinterpret_cast<uint4*>(y + off + c) = *reinterpret_cast<const uint4*>(o);
    }
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

// Threads of a stage-1 block: the per-thread lists of all its threads sit in shared memory.
template <int KP>
constexpr int topk_threads() { return KP <= 16 ? 256 : 128; }
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
template <int KP, int kTopkThreads = topk_threads<KP>()>
__global__ void __launch_bounds__(kTopkThreads)
    topk_chunks_kernel(const float* logits, const float* bias, int vocab, int splits, int chunk,
                       int pad_id, int eos_id, bool mask_eos, bool force_eos, float* stats,
                       float* vals, int* toks) {
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
#pragma unroll 4
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

// Stage 2: one block per sentence. All threads load the beam x splits sorted KP-lists (and the
// rows' log-sum-exp), then one warp merges the lists' heads k times.
constexpr int kMergeThreads = 256;

__global__ void topk_merge_kernel(const float* stats, const float* vals, const int* toks,
                                  const float* running, int beam, int vocab, int splits, int kp,
                                  int k, float* out_scores, int* out_index) {
  extern __shared__ float smem[];
  const int g = blockIdx.x, tid = threadIdx.x, lane = tid % 32;
  const int lists = beam * splits, n = lists * kp;
  float* cv = smem;
  int* ci = reinterpret_cast<int*>(cv + n);
  float* row_lse = reinterpret_cast<float*>(ci + n);
  float* stat_m = row_lse + beam;
  float* stat_s = stat_m + lists;
  int* head = reinterpret_cast<int*>(stat_s + lists);
  int* picked = head + lists;
  const int64_t first = int64_t(g) * lists;  // (row, split) blocks of this sentence
  for (int i = tid; i < lists; i += kMergeThreads) {
    stat_m[i] = stats[2 * (first + i)];
    stat_s[i] = stats[2 * (first + i) + 1];
    head[i] = 0;
  }
  __syncthreads();
  for (int b = tid; b < beam; b += kMergeThreads) {
    Lse all{kNegInf, 0.f};
    for (int s = 0; s < splits; ++s) all = lse_merge(all, Lse{stat_m[b * splits + s], stat_s[b * splits + s]});
    row_lse[b] = all.m + logf(all.s);
  }
  __syncthreads();
  for (int i = tid; i < n; i += kMergeThreads) {
    const int b = i / (splits * kp);
    const int64_t src = first * kp + i;
    const int tok = toks[src];
    const float v = vals[src];
    if (tok == kNoToken || v == kNegInf) {
      cv[i] = kNegInf;
      ci[i] = INT_MAX;  // not a candidate (lists keep these last); fillers are assigned below
    } else {
      cv[i] = (v - row_lse[b]) + running[int64_t(g) * beam + b];
      ci[i] = b * vocab + tok;
    }
  }
  __syncthreads();
  if (tid >= 32) return;
  for (int r = 0; r < k; ++r) {
    float bv = kNegInf;
    int bi = INT_MAX, bl = -1;
    for (int l = lane; l < lists; l += 32) {
      const int e = l * kp + head[l];
      if (head[l] < kp && ci[e] != INT_MAX && (bl < 0 || better(cv[e], ci[e], bv, bi))) {
        bv = cv[e]; bi = ci[e]; bl = l;
      }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      const int ol = __shfl_xor_sync(0xffffffffu, bl, o);
      if (ol >= 0 && (bl < 0 || better(ov, oi, bv, bi))) { bv = ov; bi = oi; bl = ol; }
    }
    if (lane == 0) {
      if (bl >= 0 && bv != kNegInf) {
        ++head[bl];
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

// Calls launch(kernel<HD>) for the supported head sizes.
template <typename Launch>
void with_head_dim(int head_dim, Launch launch) {
  switch (head_dim) {
    case 32: launch(std::integral_constant<int, 32>{}); break;
    case 64: launch(std::integral_constant<int, 64>{}); break;
    case 128: launch(std::integral_constant<int, 128>{}); break;
    default:
      throw Error(ErrorCode::kInvalidArgument, "CUDA engine: attention head size " +
                                                   std::to_string(head_dim) +
                                                   " is not supported (32, 64, 128)");
  }
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
  const int64_t total = int64_t(p.rows) * p.heads;
  if (total == 0) return;
  const size_t smem = size_t(kAttnWarps) * (p.head_dim + 2 * p.capacity) * sizeof(float);
  with_head_dim(p.head_dim, [&](auto hd) {
    decoder_self_attention_kernel<T, decltype(hd)::value>
        <<<unsigned((total + kAttnWarps - 1) / kAttnWarps), kAttnWarps * 32, smem, stream>>>(p);
  });
  check_launch("decoder_self_attention");
}

template <typename T>
void attention(const AttentionParams<T>& p, cudaStream_t stream) {
  if (p.q_ld % 8 != 0 || p.kv_ld % 8 != 0 || p.kv_batch_stride % 8 != 0)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: model width must be a multiple of 8");
  const int64_t total = int64_t(p.batches) * p.q_len * p.heads;
  if (total == 0) return;
  const size_t smem = size_t(kAttnWarps) * (p.head_dim + p.max_keys) * sizeof(float);
  with_head_dim(p.head_dim, [&](auto hd) {
    attention_kernel<T, decltype(hd)::value>
        <<<unsigned((total + kAttnWarps - 1) / kAttnWarps), kAttnWarps * 32, smem, stream>>>(p);
  });
  check_launch("attention");
}

template <typename T>
void layer_norm(const T* x, const T* residual, const T* bias, const T* gamma, const T* beta,
                T* y, int rows, int cols, float eps, cudaStream_t stream) {
  if (cols > kLnMaxCols || cols % (16 / sizeof(T)))
    throw Error(ErrorCode::kInvalidArgument,
                "CUDA engine: d_model must be a multiple of 8 and at most 1024");
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
    topk_chunks_kernel<KP><<<unsigned(blocks), topk_threads<KP>(), 0, stream>>>(               \
        logits, bias, s.vocab, splits, chunk, s.pad_id, s.eos_id, s.mask_eos, s.force_eos,     \
        stats, vals, toks);                                                                    \
    break;
  switch (kp) {
    NMT_TOPK_CASE(4)
    NMT_TOPK_CASE(8)
    NMT_TOPK_CASE(16)
    NMT_TOPK_CASE(32)
    default: throw Error(ErrorCode::kInternal, "beam_topk: bad k");
  }
#undef NMT_TOPK_CASE
  check_launch("topk_chunks");
  const int lists = s.beam * splits, n = lists * kp;
  const size_t smem = size_t(n) * (sizeof(float) + sizeof(int)) + s.beam * sizeof(float) +
                      size_t(lists) * (2 * sizeof(float) + sizeof(int)) + size_t(s.k) * sizeof(int);
  topk_merge_kernel<<<s.sentences, kMergeThreads, smem, stream>>>(
      stats, vals, toks, running_scores, s.beam, s.vocab, splits, kp, s.k, out_scores, out_index);
  check_launch("topk_merge");
}

#define NMT_INSTANTIATE(T)                                                                       \
  template void embed<T>(const int*, const T*, const T*, const int*, int, T*, int, int, float,   \
                         cudaStream_t);                                                          \
  template void decoder_self_attention<T>(const DecoderSelfAttention<T>&, cudaStream_t);         \
  template void attention<T>(const AttentionParams<T>&, cudaStream_t);                           \
  template void layer_norm<T>(const T*, const T*, const T*, const T*, const T*, T*, int, int,    \
                              float, cudaStream_t);                                              \
  template void bias_activation<T>(T*, const T*, int, int, kernels::Activation, cudaStream_t);   \
  template void convert_from_float<T>(const float*, T*, int64_t, cudaStream_t);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
#undef NMT_INSTANTIATE


}  // namespace nmt::cuda
