// Beam-search top-k (kernels/topk.h). beam_topk_path() (kernels/cpu/topk.cc) picks one of
// three kernel sequences by shape; all three select exactly as torch.topk (descending final
// score, ties to the lower index) and share the candidate lists (TopList, WarpTop), the
// log-sum-exp reductions and final_score():
//   kRow (rows <= 16384 tokens, >= 128 rows or a single chunk, k <= 8): topk_held_kernel, one
//     block per row, the row held in registers: its log-sum-exp, then its kp best final
//     scores (block_select_held); then topk_sentence_kernel merges each sentence's beam x kp
//     candidates.
//   kTwoPass (the default: every other shape of fewer than 512 rows or rows <= 16384 tokens),
//     three launches over (vocab chunk, row) blocks, the logits read twice:
//     topk_lse_kernel (each chunk's partial log-sum-exp); the row's log-sum-exp from the
//     partials, each token's final score and the chunk's kp best (the logits re-read, mostly
//     from L2) in topk_held_kernel (chunks of at most kBeamTopkHeldChunkTokens, k <= 8: held
//     in registers, block_select_held; beam_topk_splits cuts rows of up to 64 x that many
//     tokens so) or topk_score_kernel (per-thread sorted lists); topk_sentence_kernel.
//   kOnePass (>= 512 rows wider than 16384 tokens), two launches, the logits read once:
//     topk_chunk_kernel, per (vocab chunk of at most kBeamTopkChunkTokens, row), the chunk
//     held in registers, its partial log-sum-exp and its kC best (masked logit, index) pairs
//     (log_softmax is monotone within a row; kC = 2 x kp, at most 32, block_select_held);
//     topk_merge_kernel, per sentence, each row's log-sum-exp, the candidates' final
//     scores, the k best. Where float
//     rounding makes different logits tie in the final score the logit order can disagree
//     with the tie rule; the merge detects when a dropped token could be involved and then
//     rescans the sentence's rows on the final scores (rare with kC > k: see unsafe_chunk).
//     It pays where the logits are large (H100, Transformer-base, 512..4096 rows: 7-17%
//     shorter decode steps, run 8 of bench/history/engine-cuda.md); at few rows its merge (one block per
//     sentence) is slower than the two-pass path's launches, so small steps keep that.
// kp = k rounded up to a power of two.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/topk.h"

namespace nmt::kernels {
namespace cuda {
namespace {

constexpr int kChunkThreads = 256;
constexpr int kNoToken = INT_MAX;  // empty slot; loses against every real candidate

// Order of candidates: higher value first, then lower index.
__device__ __forceinline__ bool better(float v, int i, float w, int j) {
  return v > w || (v == w && i < j);
}

// A sorted (best first) list of kK candidates in registers (indices are compile-time after
// unrolling, so the arrays never leave registers).
template <int kK>
struct TopList {
  float v[kK];
  int i[kK];
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int s = 0; s < kK; ++s) {
      v[s] = -INFINITY;
      i[s] = kNoToken;
    }
  }
  __device__ __forceinline__ void push(float value, int index) {
    if (!better(value, index, v[kK - 1], i[kK - 1])) return;
    v[kK - 1] = value;
    i[kK - 1] = index;
#pragma unroll
    for (int s = kK - 1; s > 0; --s) {
      if (better(v[s], i[s], v[s - 1], i[s - 1])) {
        const float tv = v[s];
        v[s] = v[s - 1];
        v[s - 1] = tv;
        const int ti = i[s];
        i[s] = i[s - 1];
        i[s - 1] = ti;
      }
    }
  }
  __device__ __forceinline__ void pop() {
#pragma unroll
    for (int s = 0; s < kK - 1; ++s) {
      v[s] = v[s + 1];
      i[s] = i[s + 1];
    }
    v[kK - 1] = -INFINITY;
    i[kK - 1] = kNoToken;
  }
};

// Merges the lists of the 32 lanes: emit(r, value, index) for the warp's r-th best, r < count.
template <int kK, class Emit>
__device__ __forceinline__ void warp_merge(TopList<kK>& list, int count, Emit emit) {
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < count; ++r) {
    float v = list.v[0];
    int i = list.i[0], owner = lane;
#pragma unroll
    for (int mask = 16; mask > 0; mask /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, mask);
      const int oi = __shfl_xor_sync(0xffffffffu, i, mask);
      const int oo = __shfl_xor_sync(0xffffffffu, owner, mask);
      if (better(ov, oi, v, i) || (ov == v && oi == i && oo < owner)) {
        v = ov;
        i = oi;
        owner = oo;
      }
    }
    if (lane == owner) list.pop();
    if (lane == 0) emit(r, v, i);
  }
}

// Merges the lists of all threads of a kChunkThreads block; warp 0 then calls emit(r, value,
// index) for the block's r-th best, r < count. Ends with warp 0 alone (the others return).
template <int kK, class Emit>
__device__ __forceinline__ bool block_merge(TopList<kK>& list, int count, Emit emit) {
  __shared__ float s_v[kChunkThreads / 32][kK];
  __shared__ int s_i[kChunkThreads / 32][kK];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  warp_merge<kK>(list, kK, [&](int r, float v, int i) {
    s_v[warp][r] = v;
    s_i[warp][r] = i;
  });
  __syncthreads();
  if (warp != 0) return false;
  list.clear();
  for (int c = lane; c < (kChunkThreads / 32) * kK; c += 32)
    list.push(s_v[c / kK][c % kK], s_i[c / kK][c % kK]);
  warp_merge<kK>(list, count, emit);
  return true;
}

// The kC best (value, index) pairs a warp has been offered, sorted best first: lane s holds
// the s-th (lanes >= kC hold nothing of use). Every lane calls offer() together, one candidate
// each; only candidates better than the warp's current kC-th are inserted, one at a time, so 32
// candidates cost a compare and a ballot, and an insertion a few shuffles. (A per-thread list
// costs its whole insertion chain whenever any lane of the warp inserts, which in the first
// hundreds of candidates is nearly always.)
template <int kC>
struct WarpTop {
  static_assert(kC >= 1 && kC <= 32, "one entry per lane");
  float v = -INFINITY;  // this lane's entry
  int i = kNoToken;
  float worst_v = -INFINITY;  // entry kC - 1, the same in every lane
  int worst_i = kNoToken;
  __device__ __forceinline__ void insert(float cv, int ci) {  // cv, ci: the same in every lane
    const int lane = threadIdx.x % 32;
    const int pos = __popc(__ballot_sync(0xffffffffu, lane < kC && better(v, i, cv, ci)));
    const float up_v = __shfl_up_sync(0xffffffffu, v, 1);
    const int up_i = __shfl_up_sync(0xffffffffu, i, 1);
    if (lane == pos) {
      v = cv;
      i = ci;
    } else if (lane > pos) {
      v = up_v;
      i = up_i;
    }
    worst_v = __shfl_sync(0xffffffffu, v, kC - 1);
    worst_i = __shfl_sync(0xffffffffu, i, kC - 1);
  }
  __device__ __forceinline__ void offer(float cv, int ci) {
    unsigned m = __ballot_sync(0xffffffffu, better(cv, ci, worst_v, worst_i));
    while (m) {
      const int src = __ffs(m) - 1;
      m &= m - 1;
      const float bv = __shfl_sync(0xffffffffu, cv, src);
      const int bi = __shfl_sync(0xffffffffu, ci, src);
      if (better(bv, bi, worst_v, worst_i)) insert(bv, bi);
    }
  }
};

// The block's count best of its warps' lists (count <= kC): warp 0 takes the other warps' entries
// from shared memory, then its lanes r < count call emit(r, value, index) for the r-th best.
template <int kC, class Emit>
__device__ __forceinline__ void block_select(WarpTop<kC>& top, int count, Emit emit) {
  constexpr int kWarps = kChunkThreads / 32;
  __shared__ float s_v[kWarps * kC];
  __shared__ int s_i[kWarps * kC];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane < kC) {
    s_v[warp * kC + lane] = top.v;
    s_i[warp * kC + lane] = top.i;
  }
  __syncthreads();
  if (warp != 0) return;
  for (int c0 = kC; c0 < kWarps * kC; c0 += 32) {  // warp 0's own entries are [0, kC)
    const int c = c0 + lane;
    const bool in = c < kWarps * kC;
    top.offer(in ? s_v[c] : -INFINITY, in ? s_i[c] : kNoToken);
  }
  if (lane < count) emit(lane, top.v, top.i);
}

struct OnlineLse {  // running max and sum of exp(x - max)
  float m = -INFINITY, s = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x > m) {
      s = s * __expf(m - x) + 1.f;  // m = -inf: s = 0 * 0 + 1
      m = x;
    } else if (x != -INFINITY) {
      s += __expf(x - m);
    }
  }
  __device__ __forceinline__ void merge(float om, float os) {
    if (om == -INFINITY) return;
    if (om > m) {
      s = s * __expf(m - om) + os;
      m = om;
    } else {
      s += os * __expf(om - m);
    }
  }
};

// ---- Held rows: a block's tokens in registers (kRow rows, kOnePass chunks) ----

// Tokens [begin, end) of a row, kPer a thread in registers. kVec consecutive tokens per load
// (4 where the rows are aligned for it): register u of thread x holds token
// begin + kVec * (x + (u / kVec) * kChunkThreads) + u % kVec. Indices are offset by base (the
// row's place in its sentence).
template <int kVec>
struct HeldTokens {
  int begin, end, base;
  __device__ __forceinline__ int token(int u) const {
    return begin + kVec * (int(threadIdx.x) + (u / kVec) * kChunkThreads) + u % kVec;
  }
  __device__ __forceinline__ bool in(int u) const { return token(u) < end; }
  __device__ __forceinline__ int index(int u) const { return base + token(u); }
};

// Loads the held tokens of row x (+ bias) into z, -inf past the end, every load issued before
// the first is used. kVec = 4 needs x + begin and bias + begin aligned to 4 elements and the
// row (not the bias) readable up to a multiple of 4 tokens past end (a row stride that is a
// multiple of 4). Registers [kCheckFrom, kPer) are compared with the end; the others are known
// to be in the row (three instructions a token fewer).
template <int kCheckFrom, typename T, int kVec, int kPer>
__device__ __forceinline__ void load_held_tokens(const T* x, const float* bias,
                                                 const HeldTokens<kVec>& held, float (&z)[kPer]) {
  static_assert(kPer % kVec == 0 && kCheckFrom % kVec == 0, "whole loads a thread");
#pragma unroll
  for (int g = 0; g < kPer; g += kVec) {
    const bool check = g >= kCheckFrom;
    const int t = held.token(g);
    float v[kVec], b[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = b[j] = 0.f;
    if (!check || t < held.end) {
      load_pack<T, kVec>(x + t, v);
      if (bias && (!check || t + kVec <= held.end)) {
        load_pack<float, kVec>(bias + t, b);
      } else if (bias) {  // the bias ends with the row
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          if (t + j < held.end) b[j] = bias[t + j];
      }
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float value = bias ? v[j] + b[j] : v[j];
      z[g + j] = !check || t + j < held.end ? value : -INFINITY;
    }
  }
}

// A thread's tokens increase with the register, so where the first kPer - kVec are in the row
// (a chunk or row at least (kPer / kVec - 1) * kVec * kChunkThreads tokens long, as the engine's
// are) only the last load is checked.
template <typename T, int kVec, int kPer>
__device__ __forceinline__ void load_held(const T* x, const float* bias, const HeldTokens<kVec>& held,
                                          float (&z)[kPer]) {
  if (held.in(kPer - kVec - 1))
    load_held_tokens<kPer - kVec>(x, bias, held, z);
  else
    load_held_tokens<0>(x, bias, held, z);
}

// 2^x, flushing denormal results to zero (the log-sum-exp's terms; __expf adds denormal
// handling around the same instruction).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The largest of a thread's held values (-inf past the end: never above a held one).
template <int kPer>
__device__ __forceinline__ float held_max(const float (&z)[kPer]) {
  float m = -INFINITY;
#pragma unroll
  for (int u = 0; u < kPer; ++u) m = fmaxf(m, z[u]);
  return m;
}

// The (max, sum of exp) of a thread's held values (-inf: none), for block_lse.
template <int kPer>
__device__ __forceinline__ OnlineLse held_lse(const float (&z)[kPer]) {
  OnlineLse lse;
  lse.m = held_max(z);
  if (lse.m == -INFINITY) return lse;
  constexpr float kLog2e = 1.4426950408889634f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) lse.s += fast_exp2((z[u] - lse.m) * kLog2e);  // -inf: 0
  return lse;
}

// Sets the held key of token t to `value`, if this thread holds it (one thread does); returns
// whether it did.
template <int kVec, int kPer>
__device__ __forceinline__ bool set_held(float (&key)[kPer], const HeldTokens<kVec>& held, int t,
                                         float value) {
  const int offset = t - held.begin;
  if (t < 0 || offset < 0 || t >= held.end || (offset / kVec) % kChunkThreads != int(threadIdx.x)) return false;
  const int u = offset / kVec / kChunkThreads * kVec + offset % kVec;
#pragma unroll
  for (int w = 0; w < kPer; ++w)
    if (w == u) key[w] = value;
  return true;
}

// emit(r, key, index) for the r-th best of the n distinct (key, index) pairs in shared memory,
// each r < count, on the thread that ranked it (past the n pairs: -inf, kNoToken). A pair's
// rank is the number of better ones: n compares a pair, no chain of merges.
template <class Emit>
__device__ __forceinline__ void emit_ranked(const float* s_key, const int* s_index, int n, int count,
                                            Emit emit) {
  for (int c = threadIdx.x; c < n; c += kChunkThreads) {
    const float v = s_key[c];
    const int i = s_index[c];
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += better(s_key[j], s_index[j], v, i);
    if (rank < count) emit(rank, v, i);
  }
  for (int r = n + int(threadIdx.x); r < count; r += kChunkThreads) emit(r, -INFINITY, kNoToken);
}

// Room in shared memory for the keys that reach block_select_held's threshold.
constexpr int kHeldCandidates = 256;

// The block's kK best (key, index) pairs, exact (ties to the lower index), among the keys its
// threads hold: key[u] for held token u where held.in(u), -inf past the end; thread_max is the
// largest of the thread's keys. emit(r, key, index) runs once for each r < kK, on any thread
// (past the held keys: -inf, kNoToken).
// The threads form kK equal groups; every group holds a key at least the least of the groups'
// maxima, T, so the kK best keys are >= T, and few others usually are (tens of a chunk's
// thousands). Each of those takes a place in shared memory by a shared atomic, where its rank
// is counted: per key a max and a compare, the whole test a compare and a branch a key.
// (WarpTop's ballot and compare per key and its insertions made the top-k instruction-bound:
// ncu, H100, 74% SM throughput at 31% of DRAM bandwidth. A per-thread count, a warp scan and a
// second pass over the keys to place them, with a max over the keys of its own, took the chunk
// kernel to 53 instructions a logit against 33 now: end-to-end run 25.)
// When more than kHeldCandidates keys reach T (keys that tie by the hundred, as a dead beam's
// scores all do at the first step), or T is -inf (a group with no key above -inf), WarpTop
// per warp and block_select instead.
template <int kK, int kVec, int kPer, class Emit>
__device__ __forceinline__ void block_select_held(const float (&key)[kPer],
                                                  const HeldTokens<kVec>& held, float thread_max,
                                                  Emit emit) {
  static_assert(kK >= 1 && kK <= 32 && (kK & (kK - 1)) == 0, "kK a power of two <= 32");
  constexpr int kLanes = kChunkThreads / kK < 32 ? kChunkThreads / kK : 32;  // per group and warp
  constexpr int kParts = kChunkThreads / kLanes;  // partial maxima, kParts / kK per group
  __shared__ float s_part[kParts];
  __shared__ float s_key[kHeldCandidates];
  __shared__ int s_index[kHeldCandidates];
  __shared__ int s_count;
  const float m = group_allreduce<kLanes>(thread_max, MaxOp());
  if (threadIdx.x % kLanes == 0) s_part[threadIdx.x / kLanes] = m;
  if (threadIdx.x == 0) s_count = 0;
  __syncthreads();
  float threshold = INFINITY;
#pragma unroll
  for (int g = 0; g < kK; ++g) {
    float group_max = -INFINITY;
#pragma unroll
    for (int p = 0; p < kParts / kK; ++p) group_max = fmaxf(group_max, s_part[g * (kParts / kK) + p]);
    threshold = fminf(threshold, group_max);
  }
  // threshold > -inf: a key past the end (-inf) never reaches it
  if (threshold > -INFINITY && thread_max >= threshold) {
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      if (key[u] >= threshold) {
        const int pos = atomicAdd(&s_count, 1);
        if (pos < kHeldCandidates) {
          s_key[pos] = key[u];
          s_index[pos] = held.index(u);
        }
      }
    }
  }
  __syncthreads();
  const int n = s_count;
  if (threshold == -INFINITY || n > kHeldCandidates) {
    WarpTop<kK> top;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const bool in = held.in(u);
      top.offer(in ? key[u] : -INFINITY, in ? held.index(u) : kNoToken);
    }
    block_select<kK>(top, kK, emit);
    return;
  }
  emit_ranked(s_key, s_index, n, kK, emit);
}

struct Workspace {
  float2* lse_parts;  // [rows][splits]
  float* scores;      // [rows][splits][per_chunk]
  int* index;         // [rows][splits][per_chunk]
  Workspace(void* ws, int64_t chunks, int per_chunk) {
    lse_parts = static_cast<float2*>(ws);
    scores = reinterpret_cast<float*>(lse_parts + chunks);
    index = reinterpret_cast<int*>(scores + chunks * per_chunk);
  }
};

constexpr int kLoadsInFlight = 8;  // logits each thread loads before using them

struct Chunk {  // tokens [begin, end) of a row: its index-th piece of chunk tokens
  int begin, end;
  __device__ Chunk(int vocab, int chunk, int index) {
    begin = index * chunk;
    end = min(vocab, begin + chunk);
  }
};

// Calls f(token, logit + bias, in) for the thread's share of chunk c, kLoadsInFlight loads at
// once. Every thread of the block makes the same number of calls (WarpTop needs the whole
// warp): past the chunk, in = false and the value is -inf.
template <typename T, class F>
__device__ __forceinline__ void for_each_logit(const T* x, const float* bias, Chunk c, F f) {
  for (int t0 = c.begin + threadIdx.x; t0 - int(threadIdx.x) < c.end;
       t0 += kChunkThreads * kLoadsInFlight) {
    float v[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int t = t0 + u * kChunkThreads;
      v[u] = t < c.end ? to_float(x[t]) + (bias ? bias[t] : 0.f) : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int t = t0 + u * kChunkThreads;
      f(t, v[u], t < c.end);
    }
  }
}

__device__ __forceinline__ void warp_allreduce(OnlineLse& lse) {
#pragma unroll
  for (int mask = 16; mask > 0; mask /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, lse.m, mask);
    const float os = __shfl_xor_sync(0xffffffffu, lse.s, mask);
    lse.merge(om, os);
  }
}

// The block's (max, sum of exp) from every thread's partial; valid in thread 0.
__device__ __forceinline__ OnlineLse block_lse(OnlineLse lse) {
  __shared__ float s_m[kChunkThreads / 32], s_s[kChunkThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  warp_allreduce(lse);
  if (lane == 0) {
    s_m[warp] = lse.m;
    s_s[warp] = lse.s;
  }
  __syncthreads();
  OnlineLse total;
  if (threadIdx.x == 0)
    for (int w = 0; w < kChunkThreads / 32; ++w) total.merge(s_m[w], s_s[w]);
  return total;
}

// A row's log-sum-exp from its chunks' partials, computed by one warp (valid in every lane).
__device__ __forceinline__ float warp_row_lse(const Workspace& ws, int64_t row, int splits) {
  OnlineLse lse;
  for (int s = threadIdx.x % 32; s < splits; s += 32) {
    const float2 part = ws.lse_parts[row * splits + s];
    lse.merge(part.x, part.y);
  }
  warp_allreduce(lse);
  return lse.m + logf(lse.s);
}

// The masks of a sentence: its kTopkMaskEos / kTopkForceEos / kTopkForceToken bits and the
// token forced on it (EOS under kTopkForceEos, which wins; its TopkMasks::forced_tokens entry
// under kTopkForceToken; -1 none).
struct SentenceMask {
  unsigned flags;
  int forced;
  bool teacher;  // kTopkTeacherForced: the forced token keeps its real log-prob (not under force EOS)
};
__device__ __forceinline__ SentenceMask row_mask(const TopkMasks& masks, int64_t row, int beam) {
  const int64_t sentence = row / beam;
  const unsigned flags = masks.sentence_flags
                             ? masks.sentence_flags[sentence]
                             : (masks.mask_eos ? kTopkMaskEos : 0u) | (masks.force_eos ? kTopkForceEos : 0u);
  int forced = -1;
  if (flags & kTopkForceEos) forced = masks.eos_id;
  else if (flags & kTopkForceToken) forced = masks.forced_tokens[sentence];
  const bool teacher = (flags & kTopkTeacherForced) && !(flags & kTopkForceEos) && forced >= 0;
  return {flags, forced, teacher};
}

// Repetition controls: a sentence whose rows beam_token_edits_cuda made final log-probs
// (kTopkLogProbs) takes no bias and a log-sum-exp of 0.
__device__ __forceinline__ const float* row_bias(const float* bias, const SentenceMask& mask) {
  return (mask.flags & kTopkLogProbs) ? nullptr : bias;
}
__device__ __forceinline__ float row_lse(float lse, const SentenceMask& mask) {
  return (mask.flags & kTopkLogProbs) ? 0.f : lse;
}

// A token's final score: logit + bias - lse, masked, + running score, exactly as the reference.
__device__ __forceinline__ float final_score(int t, float v, float lse, float running,
                                             const TopkMasks& masks, const SentenceMask& mask) {
  float logp = v - lse;
  if (t == masks.pad_id || ((mask.flags & kTopkMaskEos) && t == masks.eos_id)) logp = -INFINITY;
  if (mask.forced >= 0) logp = t != mask.forced ? -INFINITY : mask.teacher ? v - lse : 0.f;
  return logp + running;
}

// The logit (+ bias) of token t of row x, as load_held reads it: a teacher-forced token's key.
template <typename T>
__device__ __forceinline__ float logit_of(const T* x, const float* bias, int t) {
  return to_float(x[t]) + (bias ? bias[t] : 0.f);
}

// NextRows of one sentence (rows first_row, ...) from its k best (v, i: shared memory, best
// first), by the 32 lanes of one warp: continuing_beams() of model/decoding/beam_search.cc to the bit
// (the same float adds; a candidate's rank counts the better ones and the equal ones ranked
// before it, as its stable ranking does). Lane b < beam brings the cache row of the sentence's
// row b (row_cache_row, read at the kernel's start, off the step's critical path). A
// candidate that names no row of the sentence (a padding sentence's) continues the row it
// lands in with token 0, so that the next step reads nothing out of range.
__device__ __forceinline__ int sentence_cache_row(const NextRows& next, int64_t first_row, int beam) {
  const int lane = threadIdx.x % 32;
  return next.cache_rows && lane < beam ? next.cache_rows[first_row + lane] : 0;
}
__device__ void write_next_rows(const float* v, const int* i, int k, int beam, int vocab, int eos,
                                bool forced, int64_t first_row, int row_cache_row, const NextRows& next) {
  constexpr float kNeg = -1.0e9f;  // transformers' mark of an impossible score, as the host's
  const int lane = threadIdx.x % 32;
  float running = -INFINITY;
  int c = kNoToken;
  if (lane < k) {
    c = i[lane];
    const bool hit = (c != kNoToken && c % vocab == eos) || forced;
    running = v[lane] + (hit ? kNeg : 0.f);
  }
  int rank = 0;
  for (int j = 0; j < k; ++j) {
    const float o = __shfl_sync(0xffffffffu, running, j);
    rank += o > running || (o == running && j < lane);
  }
  const int from = c != kNoToken && c >= 0 && c / vocab < beam ? c / vocab : -1;
  const int parent = __shfl_sync(0xffffffffu, row_cache_row, from >= 0 ? from : 0);
  const int own = __shfl_sync(0xffffffffu, row_cache_row, rank < beam ? rank : 0);
  if (lane < k && rank < beam) {
    next.tokens[first_row + rank] = from >= 0 ? c - from * vocab : 0;
    next.parents[first_row + rank] = from >= 0 ? parent : own;
    next.running[first_row + rank] = running;
  }
  for (int b = k + lane; b < beam; b += 32) {  // fewer candidates than beams: not the search's
    next.tokens[first_row + b] = 0;
    next.parents[first_row + b] = next.cache_rows[first_row + b];
    next.running[first_row + b] = 0.f;
  }
}

// ---- kTwoPass: topk_lse_kernel, topk_held_kernel or topk_score_kernel, topk_sentence_kernel ----

// Pass 1, per (vocab chunk, row): the chunk's partial log-sum-exp.
template <typename T>
__global__ void __launch_bounds__(kChunkThreads) topk_lse_kernel(const T* logits,
                                                                 int64_t row_stride,
                                                                 const float* bias, int vocab,
                                                                 int chunk, Workspace ws) {
  pdl_prologue();
  const int64_t row = blockIdx.y;
  OnlineLse lse;
  for_each_logit(logits + row * row_stride, bias, Chunk(vocab, chunk, blockIdx.x),
                 [&](int, float v, bool) { lse.add(v); });  // -inf (past the chunk): nothing
  const OnlineLse total = block_lse(lse);
  if (threadIdx.x == 0)
    ws.lse_parts[row * gridDim.x + blockIdx.x] = make_float2(total.m, total.s);
}

// Pass 2, per (vocab chunk, row): the row's log-sum-exp from pass 1's partials, then the
// chunk's kK best final scores (selected on the final score itself, so ties are exact).
template <typename T, int kK>
__global__ void __launch_bounds__(kChunkThreads) topk_score_kernel(
    const T* logits, int64_t row_stride, const float* bias, const float* running_scores,
    int beam, int vocab, int chunk, TopkMasks masks, Workspace ws) {
  pdl_prologue();
  const int64_t row = blockIdx.y;
  const int splits = gridDim.x;
  __shared__ float s_lse;
  if (threadIdx.x < 32) {
    const float lse = warp_row_lse(ws, row, splits);
    if (threadIdx.x == 0) s_lse = lse;
  }
  __syncthreads();
  const SentenceMask mask = row_mask(masks, row, beam);
  const float lse = row_lse(s_lse, mask), running = running_scores[row];
  const int base = int(row % beam) * vocab;
  TopList<kK> list;
  list.clear();
  for_each_logit(logits + row * row_stride, row_bias(bias, mask), Chunk(vocab, chunk, blockIdx.x),
                 [&](int t, float v, bool in) {
                   if (in) list.push(final_score(t, v, lse, running, masks, mask), base + t);
                 });
  const int64_t out = (row * splits + blockIdx.x) * kK;
  block_merge<kK>(list, kK, [&](int r, float v, int i) {
    ws.scores[out + r] = v;
    ws.index[out + r] = i;
  });
}

// ---- kOnePass: topk_chunk_kernel, then topk_merge_kernel ----

// The key a chunk selects on before the row's log-sum-exp is known: the masked logit (pad and
// masked EOS -inf; a forced token, EOS or SentenceMask::forced: it +inf, every other -inf).
// final_score(t, key, ...) equals final_score(t, v, ...) and never decreases as the key grows,
// so a chunk's best keys hold its best final scores, up to ties that float rounding creates
// between different keys; topk_merge_kernel detects those and rescans (see unsafe_chunk).

// A forced token (EOS at max length, or the forced first token) leaves every key -inf but its
// own (forced_key), so the kK best of the held tokens are it and the lowest other indices, in
// better() order: emitted by one thread, without a scan (which every key tying at -inf would
// send to block_select_held's fallback).
template <int kK, int kVec, class Emit>
__device__ __forceinline__ void select_forced(const HeldTokens<kVec>& held, int forced, float forced_key,
                                              Emit emit) {
  if (threadIdx.x != 0) return;
  bool forced_left = forced >= held.begin && forced < held.end;
  int t = held.begin;
  for (int r = 0; r < kK; ++r) {
    if (t == forced) ++t;
    const bool other = t < held.end;
    if (forced_left && (!other || better(forced_key, held.base + forced, -INFINITY, held.base + t))) {
      emit(r, forced_key, held.base + forced);
      forced_left = false;
    } else if (other) {
      emit(r, -INFINITY, held.base + t++);
    } else {
      emit(r, -INFINITY, kNoToken);
    }
  }
}

// The pad and (when masked) EOS keys to -inf: the one or two held keys the masks touch (not a
// forced token: select_forced). Returns the largest of the thread's keys after it: thread_max
// (the largest before) unless a masked key was this thread's.
template <int kVec, int kPer>
__device__ __forceinline__ float mask_held(float (&key)[kPer], const HeldTokens<kVec>& held,
                                           const TopkMasks& masks, const SentenceMask& mask,
                                           float thread_max) {
  bool touched = set_held(key, held, masks.pad_id, -INFINITY);
  if (mask.flags & kTopkMaskEos) touched |= set_held(key, held, masks.eos_id, -INFINITY);
  return touched ? held_max(key) : thread_max;
}

// One pass over a chunk of a row (at most kBeamTopkChunkTokens, held in registers): its
// partial log-sum-exp (of the unmasked logits) and its kC best (key, index) pairs.
// Four blocks an SM (at most 64 registers, ptxas spills 36 bytes): the blocks' reductions leave
// the memory idle unless other blocks load meanwhile (H100, base 1024 rows: three blocks 15%
// faster than two; H200: four 468 -> 391 us against three, end-to-end run 26).
template <typename T, int kC, int kVec>
__global__ void __launch_bounds__(kChunkThreads, 4) topk_chunk_kernel(
    const T* logits, int64_t row_stride, const float* bias, int beam, int vocab, int chunk,
    TopkMasks masks, Workspace ws) {
  constexpr int kPer = kBeamTopkChunkTokens / kChunkThreads;
  pdl_prologue();
  const int64_t row = blockIdx.y;
  const Chunk c(vocab, chunk, blockIdx.x);
  const HeldTokens<kVec> held{c.begin, c.end, int(row % beam) * vocab};
  const SentenceMask mask = row_mask(masks, row, beam);
  float z[kPer];
  load_held(logits + row * row_stride, row_bias(bias, mask), held, z);
  const OnlineLse mine = held_lse(z);
  const OnlineLse total = block_lse(mine);
  const int64_t slot = row * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) ws.lse_parts[slot] = make_float2(total.m, total.s);
  const auto emit = [&](int r, float v, int i) {
    ws.scores[slot * kC + r] = v;
    ws.index[slot * kC + r] = i;
  };
  // a teacher-forced token's key is its logit: topk_merge_kernel's final_score makes its log-prob
  if (mask.forced >= 0)
    return select_forced<kC>(held, mask.forced,
                             mask.teacher ? logit_of(logits + row * row_stride, bias, mask.forced) : INFINITY, emit);
  const float thread_max = mask_held(z, held, masks, mask, mine.m);
  block_select_held<kC>(z, held, thread_max, emit);
}

// Whether a chunk's dropped tokens (those after its kC kept ones in key order) could still
// belong to the sentence's k best, whose worst is (fk, ik). A dropped token has a key below
// the chunk's last kept key w, or equal to it with a higher index. Its final score is then at
// most final(w) (equal: higher index than iw), or at most final(next float below w): only
// float rounding can make these tie with fk, which is rare but possible (e.g. a huge negative
// running score that swallows the differences of the logits).
__device__ __forceinline__ bool unsafe_chunk(float w, int iw, int t, float lse, float running,
                                             const TopkMasks& masks, const SentenceMask& mask, float fk,
                                             int ik) {
  const float fw = final_score(t, w, lse, running, masks, mask);
  if (fw > fk || (fw == fk && iw < ik)) return true;
  if (w == -INFINITY) return false;  // nothing has a lower key
  // keys below w: -inf only under a forced token, else at most the next float below w (masked
  // tokens score -inf, below that bound)
  const float below = mask.forced >= 0 ? -INFINITY
                                              : (nextafterf(w, -INFINITY) - lse) + running;
  return below >= fk;
}

// One block per sentence: each row's log-sum-exp from its chunks' partials, the final scores
// of the beam x splits x kC candidates, their k best; then the check that no chunk dropped a
// token that belongs there (else the block rescans the sentence's rows, exactly as the
// reference orders them).
template <typename T, int kC>
__global__ void __launch_bounds__(kChunkThreads) topk_merge_kernel(
    const T* logits, int64_t row_stride, const float* bias, const float* running_scores,
    int beam, int vocab, int splits, int chunk, int k, TopkMasks masks, Workspace ws,
    float* out_scores, int* out_index, NextRows next) {
  pdl_prologue();
  extern __shared__ float s_lse[];  // [beam]
  __shared__ float s_best_v[kC];
  __shared__ int s_best_i[kC];
  const int64_t sentence = blockIdx.x, first_row = sentence * beam;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row_cache_row = sentence_cache_row(next, first_row, beam);
  const SentenceMask mask = row_mask(masks, first_row, beam);
  for (int r = warp; r < beam; r += kChunkThreads / 32) {
    const float lse = row_lse(warp_row_lse(ws, first_row + r, splits), mask);
    if (lane == 0) s_lse[r] = lse;
  }
  __syncthreads();
  const int64_t first = first_row * splits * kC, count = int64_t(beam) * splits * kC;
  {
    WarpTop<kC> top;
    for (int64_t c0 = 0; c0 < count; c0 += kChunkThreads) {
      const int64_t c = c0 + threadIdx.x;
      const int index = c < count ? ws.index[first + c] : kNoToken;
      float score = -INFINITY;
      if (index != kNoToken) {
        const int r = index / vocab;
        score = final_score(index - r * vocab, ws.scores[first + c], s_lse[r],
                            running_scores[first_row + r], masks, mask);
      }
      top.offer(score, index);
    }
    block_select<kC>(top, k, [&](int r, float v, int i) {
      s_best_v[r] = v;
      s_best_i[r] = i;
    });
  }
  __syncthreads();
  const float fk = s_best_v[k - 1];
  const int ik = s_best_i[k - 1];
  bool unsafe = false;
  for (int c = threadIdx.x; c < beam * splits; c += kChunkThreads) {
    const int r = c / splits, split = c % splits;
    if (min(vocab, (split + 1) * chunk) - split * chunk <= kC) continue;  // kept every token
    const int64_t last = first + int64_t(c) * kC + kC - 1;
    const int iw = ws.index[last];
    unsafe |= unsafe_chunk(ws.scores[last], iw, iw - r * vocab, s_lse[r],
                           running_scores[first_row + r], masks, mask, fk, ik);
  }
  if (__syncthreads_or(unsafe)) {  // rare: the sentence's rows, on the final scores
    WarpTop<kC> top;
    for (int r = 0; r < beam; ++r) {
      const T* x = logits + (first_row + r) * row_stride;
      const float lse = s_lse[r], running = running_scores[first_row + r];
      for (int t0 = 0; t0 < vocab; t0 += kChunkThreads) {
        const int t = t0 + threadIdx.x;
        const bool in = t < vocab;
        const float* b = row_bias(bias, mask);
        const float v = in ? to_float(x[t]) + (b ? b[t] : 0.f) : 0.f;
        top.offer(in ? final_score(t, v, lse, running, masks, mask) : -INFINITY,
                  in ? r * vocab + t : kNoToken);
      }
    }
    // s_best is read no more (fk, ik were taken before the barrier): it takes the rescan's
    block_select<kC>(top, k, [&](int r, float v, int i) {
      out_scores[sentence * k + r] = s_best_v[r] = v;
      out_index[sentence * k + r] = s_best_i[r] = i;
    });
    if (threadIdx.x >= 32) return;  // block_select's warp 0 holds the k best
    __syncwarp();
  } else {
    for (int r = threadIdx.x; r < k; r += kChunkThreads) {
      out_scores[sentence * k + r] = s_best_v[r];
      out_index[sentence * k + r] = s_best_i[r];
    }
  }
  if (next.cache_rows && threadIdx.x < 32)
    write_next_rows(s_best_v, s_best_i, k, beam, vocab, masks.eos_id, mask.flags & kTopkForceEos, first_row,
                    row_cache_row, next);
}

// ---- kRow: topk_held_kernel (one chunk a row), then topk_sentence_kernel ----

// Per (vocab chunk, row), the chunk held in registers (kPer tokens a thread, loaded in one
// memory round trip): its kK best final scores (block_select_held). One chunk a row (kRow,
// rows of at most kBeamTopkRowTokens tokens): the row's log-sum-exp from the registers, in one
// launch. Several (kTwoPass, chunks of at most kTwoPassHeldTokens): from topk_lse_kernel's
// partials, in place of topk_score_kernel, whose per-token list insertion took 10 us at the
// demo model's batch 1 (4 rows x 7 chunks, ncu, bench/history/engine-cuda.md end-to-end run 15).
static_assert(kBeamTopkRowTokens <= 64 * kChunkThreads, "kPer is at most 64");
static_assert(kBeamTopkChunkTokens % (4 * kChunkThreads) == 0, "whole loads a thread");
constexpr int kTwoPassHeldTokens = kBeamTopkHeldChunkTokens;
static_assert(kTwoPassHeldTokens % (4 * kChunkThreads) == 0, "whole loads a thread");

// Three blocks an SM where kPer <= 32, not four as topk_chunk_kernel: at 64 registers kPer = 32
// spills, and the demo model's 768-row launch took 18.1 -> 19.0 us (end-to-end run 26).
template <typename T, int kK, int kVec, int kPer>
__global__ void __launch_bounds__(kChunkThreads, kPer <= 32 ? 3 : 1) topk_held_kernel(
    const T* logits, int64_t row_stride, const float* bias, const float* running_scores,
    int beam, int vocab, int chunk, TopkMasks masks, Workspace ws) {
  pdl_prologue();
  const int64_t row = blockIdx.y;
  const int splits = gridDim.x;
  const Chunk c(vocab, chunk, blockIdx.x);
  const HeldTokens<kVec> held{c.begin, c.end, int(row % beam) * vocab};
  const SentenceMask mask = row_mask(masks, row, beam);
  float z[kPer];
  load_held(logits + row * row_stride, row_bias(bias, mask), held, z);
  __shared__ float s_lse;
  float thread_max;  // of z
  if (splits == 1) {
    const OnlineLse mine = held_lse(z);
    thread_max = mine.m;
    const OnlineLse total = block_lse(mine);
    if (threadIdx.x == 0) s_lse = total.m + logf(total.s);
  } else {
    thread_max = held_max(z);
    if (threadIdx.x < 32) {
      const float lse = warp_row_lse(ws, row, splits);
      if (threadIdx.x == 0) s_lse = lse;
    }
  }
  __syncthreads();
  const float row_lse = cuda::row_lse(s_lse, mask), running = running_scores[row];
  const int64_t out = (row * splits + blockIdx.x) * kK;
  const auto emit = [&](int r, float v, int i) {
    ws.scores[out + r] = v;
    ws.index[out + r] = i;
  };
  if (mask.forced >= 0)
    return select_forced<kK>(held, mask.forced,
                             final_score(mask.forced,
                                         mask.teacher ? logit_of(logits + row * row_stride, bias, mask.forced) : 0.f,
                                         row_lse, running, masks, mask),
                             emit);
  // final_score(), its masks applied to the one or two tokens they touch; rounding is
  // monotone, so the largest key is the key of the largest logit
  const auto key = [&](float v) { return (v - row_lse) + running; };
#pragma unroll
  for (int u = 0; u < kPer; ++u) z[u] = key(z[u]);
  thread_max = mask_held(z, held, masks, mask, key(thread_max));
  block_select_held<kK>(z, held, thread_max, emit);
}

// The best of (v, i) over the warp, by better(); valid in every lane.
__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int mask = 16; mask > 0; mask /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, mask);
    const int oi = __shfl_xor_sync(0xffffffffu, i, mask);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// Room in shared memory for the candidates topk_sentence_kernel ranks.
constexpr int kSentenceCandidates = 256;

// kRow and kTwoPass, one block per sentence, over its beam x splits lists of kp candidates
// (final scores; each list sorted best first, empty entries last). The best of the lists' k-th
// entries, T, bounds the choice: that list alone has k candidates at least T, so the k best are
// all at least T, and usually few others are (the lists' other entries past T). Those take a
// place in shared memory by a shared atomic, where each one's rank is counted (emit_ranked):
// one max over the block and a compare a candidate, where per-thread lists merged warp by warp
// made a chain of 2 x k rounds of shuffles. Where a thread cannot hold its share in registers
// (kp > kBeamTopkRowMaxK or more lists than threads) or more than kSentenceCandidates reach T
// (hundreds of tied scores), the warp merge instead (block_merge).
template <int kK>
__global__ void __launch_bounds__(kChunkThreads) topk_sentence_kernel(int beam, int vocab, int splits, int k,
                                                                      TopkMasks masks, Workspace ws,
                                                                      float* out_scores, int* out_index,
                                                                      NextRows next) {
  pdl_prologue();
  constexpr int kWarps = kChunkThreads / 32;
  constexpr int kHeld = kK <= kBeamTopkRowMaxK ? kK : 1;  // candidates a thread holds
  __shared__ float s_v[kK];
  __shared__ int s_i[kK];
  __shared__ float s_key[kSentenceCandidates], s_part_v[kWarps];
  __shared__ int s_index[kSentenceCandidates], s_part_i[kWarps];
  __shared__ int s_count;
  const int64_t sentence = blockIdx.x;
  const int row_cache_row = sentence_cache_row(next, sentence * beam, beam);
  const int lists = beam * splits;
  const int64_t first = sentence * lists * kK, count = int64_t(lists) * kK;
  const auto emit = [&](int r, float v, int i) {
    out_scores[sentence * k + r] = s_v[r] = v;
    out_index[sentence * k + r] = s_i[r] = i;
  };
  bool ranked = kK <= kBeamTopkRowMaxK && lists <= kChunkThreads;
  if (ranked) {  // block-uniform
    // Entry c = threadIdx.x + u * kChunkThreads: kK divides kChunkThreads, so a thread's
    // entries all sit at place threadIdx.x % kK of their lists.
    float v[kHeld];
    int idx[kHeld];
    float kth_v = -INFINITY;
    int kth_i = kNoToken;
#pragma unroll
    for (int u = 0; u < kHeld; ++u) {
      const int64_t c = threadIdx.x + int64_t(u) * kChunkThreads;
      idx[u] = c < count ? ws.index[first + c] : kNoToken;
      v[u] = c < count ? ws.scores[first + c] : -INFINITY;
      if (int(threadIdx.x) % kK == k - 1 && better(v[u], idx[u], kth_v, kth_i)) {
        kth_v = v[u];
        kth_i = idx[u];
      }
    }
    warp_best(kth_v, kth_i);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
      s_part_v[warp] = kth_v;
      s_part_i[warp] = kth_i;
    }
    if (threadIdx.x == 0) s_count = 0;
    __syncthreads();
    float t_v = -INFINITY;  // T; -inf and no token where no list has k entries: every one passes
    int t_i = kNoToken;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (better(s_part_v[w], s_part_i[w], t_v, t_i)) {
        t_v = s_part_v[w];
        t_i = s_part_i[w];
      }
    }
#pragma unroll
    for (int u = 0; u < kHeld; ++u) {
      if (idx[u] == kNoToken || better(t_v, t_i, v[u], idx[u])) continue;
      const int pos = atomicAdd(&s_count, 1);
      if (pos < kSentenceCandidates) {
        s_key[pos] = v[u];
        s_index[pos] = idx[u];
      }
    }
    __syncthreads();
    const int n = s_count;
    ranked = n <= kSentenceCandidates;  // block-uniform
    if (ranked) emit_ranked(s_key, s_index, n, k, emit);
  }
  if (!ranked) {
    TopList<kK> list;
    list.clear();
    for (int64_t c = threadIdx.x; c < count; c += blockDim.x) {
      const int index = ws.index[first + c];
      if (index != kNoToken) list.push(ws.scores[first + c], index);
    }
    block_merge<kK>(list, k, emit);  // warp 0's lane 0 emits
  }
  __syncthreads();  // the k best in s_v, s_i
  if (threadIdx.x < 32 && next.cache_rows) {
    const int64_t first_row = sentence * beam;
    write_next_rows(s_v, s_i, k, beam, vocab, masks.eos_id,
                    row_mask(masks, first_row, beam).flags & kTopkForceEos, first_row, row_cache_row, next);
  }
}

// Whether the held-row kernels may load 4 tokens at once: rows and bias 16-byte aligned, each
// row readable to a whole pack (float32 logits, as the engine's: 4 tokens).
template <typename T>
bool held_vectors(const T* logits, int64_t row_stride, const float* bias) {
  return pick_pack<T>(row_stride, {logits, bias}) >= 4;
}

template <typename T, int kK>
void run(const T* logits, int64_t row_stride, const float* bias, const float* running_scores,
         int64_t sentences, int beam, int vocab, int k, const TopkMasks& masks,
         float* out_scores, int* out_index, void* workspace, cudaStream_t stream, const NextRows& next) {
  const int64_t rows = sentences * beam;
  const int splits = beam_topk_splits(rows, vocab);
  const int chunk = (vocab + splits - 1) / splits;
  const dim3 grid{unsigned(splits), unsigned(rows)};
  switch (beam_topk_path(rows, vocab, k)) {  // the shapes each path is for: kernels/cpu/topk.cc
    case BeamTopkPath::kRow:  // splits == 1, vocab <= kBeamTopkRowTokens, kK <= kBeamTopkRowMaxK
    case BeamTopkPath::kTwoPass: {
      const Workspace ws(workspace, rows * splits, kK);
      // chunks of whole 4-token loads (topk_held_kernel's); topk_lse_kernel takes the same
      const int whole = (chunk + 3) / 4 * 4;
      const bool one_chunk = splits == 1;
      // topk_held_kernel: kRow's rows, kTwoPass's short chunks (k <= 8 either way)
      const bool held = kK <= kBeamTopkRowMaxK && whole <= (one_chunk ? kBeamTopkRowTokens : kTwoPassHeldTokens);
      if (!(held && one_chunk))
        launch(&topk_lse_kernel<T>, grid, kChunkThreads, 0, stream, logits, row_stride, bias, vocab, whole, ws);
      if constexpr (kK <= kBeamTopkRowMaxK) {
        const auto go = [&](auto per) {
          constexpr int kPer = decltype(per)::value;
          launch(held_vectors<T>(logits, row_stride, bias) ? &topk_held_kernel<T, kK, 4, kPer>
                                                           : &topk_held_kernel<T, kK, 1, kPer>,
                 grid, kChunkThreads, 0, stream, logits, row_stride, bias, running_scores, beam, vocab, whole,
                 masks, ws);
        };
        if (held && whole <= 8 * kChunkThreads) go(std::integral_constant<int, 8>());
        else if (held && whole <= 16 * kChunkThreads) go(std::integral_constant<int, 16>());
        else if (held && whole <= 32 * kChunkThreads) go(std::integral_constant<int, 32>());
        else if (held) go(std::integral_constant<int, 64>());
      }
      if (!held)
        launch(&topk_score_kernel<T, kK>, grid, kChunkThreads, 0, stream, logits, row_stride, bias,
               running_scores, beam, vocab, whole, masks, ws);
      launch(&topk_sentence_kernel<kK>, unsigned(sentences), kChunkThreads, 0, stream, beam, vocab, splits, k,
             masks, ws, out_scores, out_index, next);
      return;
    }
    case BeamTopkPath::kOnePass: {
      constexpr int kC = std::min(2 * kK, 32);  // beam_topk_chunk_candidates
      const Workspace ws(workspace, rows * splits, kC);
      // chunks of whole 4-token loads (still at most kBeamTopkChunkTokens); the merge takes the
      // same chunk size
      const int whole = (chunk + 3) / 4 * 4;
      launch(held_vectors<T>(logits, row_stride, bias) ? &topk_chunk_kernel<T, kC, 4> : &topk_chunk_kernel<T, kC, 1>,
             grid, kChunkThreads, 0, stream, logits, row_stride, bias, beam, vocab, whole, masks, ws);
      launch(&topk_merge_kernel<T, kC>, unsigned(sentences), kChunkThreads, beam * sizeof(float), stream,
             logits, row_stride, bias, running_scores, beam, vocab, splits, whole, k, masks, ws, out_scores,
             out_index, next);
      return;
    }
  }
}

// ---- Repetition controls: beam_token_edits_cuda ----

// One block a row: the row of a sentence flagged kTopkLogProbs becomes its final, edited
// log-probs in place (kernels/topk.h). The log-sum-exp in float with expf, as log_softmax
// computes it; the edits, each token at most once a row, by one thread each.
__device__ __forceinline__ void edit_score(float& s, float factor) {
  s = factor == 0.f ? -INFINITY : (s < 0.f ? s * factor : s / factor);
}

// Repetition controls on the device: row x's edits from its history h[0, len) (shared), as
// TokenEdits::append: the penalty on each distinct token (its first occurrence), then the
// n-gram bans (-inf: a ban wins over a penalty; a token banned twice is banned once).
__device__ void history_edits(float* x, const int* h, int len, int n, float penalty) {
  if (penalty != 1.f) {
    for (int q = threadIdx.x; q < len; q += blockDim.x) {
      const int t = h[q];
      bool first = true;
      for (int j = 0; j < q && first; ++j) first = h[j] != t;
      if (first) edit_score(x[t], penalty);
    }
  }
  __syncthreads();
  if (n > 0 && len + 1 >= n) {
    const int key = len - (n - 1);  // the last n - 1 tokens' first
    for (int i = threadIdx.x; i + n <= len; i += blockDim.x) {
      bool match = true;
      for (int j = 0; j < n - 1 && match; ++j) match = h[i + j] == h[key + j];
      if (match) x[h[i + n - 1]] = -INFINITY;
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kChunkThreads) token_edits_kernel(float* logits, int64_t row_stride,
                                                                    const float* bias, int beam, int vocab,
                                                                    const unsigned char* flags,
                                                                    const TokenEditTable* table, int first_row,
                                                                    DeviceHistory history) {
  extern __shared__ int h[];  // a device-controlled row's history
  pdl_prologue();
  const int64_t row = blockIdx.x, sentence = row / beam;
  const unsigned f = flags[sentence];
  const int64_t at = first_row + row;  // the row in the step (and the table)
  // The pinned table only for host edits (kTopkHostEdits), read before the history so that
  // its PCIe round trips overlap with the history's reads.
  int e0 = 0, e1 = 0;
  const int* edit_tokens = nullptr;
  const float* edit_factors = nullptr;
  if ((f & kTopkLogProbs) && (f & kTopkHostEdits)) {
    const TokenEditTable t = *table;
    e0 = t.begin[at];
    e1 = t.begin[at + 1];
    edit_tokens = t.tokens;
    edit_factors = t.factors;
  }
  const int n = history.ngram ? history.ngram[sentence] : 0;
  const float penalty = history.penalty ? history.penalty[sentence] : 1.f;
  const bool device = n > 0 || penalty != 1.f;
  int len = 0;
  if (device) {  // record the row's token (every step), and read its history
    const int p = history.positions[at];
    const int* keys = history.key_rows + int64_t(history.cache_rows[at]) * history.capacity;
    const int fr = history.follow[at];
    const int token = fr >= 0 ? history.follow_tokens[fr] : history.step_tokens[at];
    for (int q = threadIdx.x; q < p; q += blockDim.x) h[q] = history.tokens[keys[q]];
    if (threadIdx.x == 0) {
      h[p] = token;
      history.tokens[keys[p]] = token;
    }
    len = p + 1;
    __syncthreads();
  }
  if (!(f & kTopkLogProbs)) return;
  float* x = logits + row * row_stride;
  const bool on_logits = f & kTopkEditLogits;
  // Greedy: the edits on z = logits + bias, so z is stored first. Beam search: z only in
  // registers (the same float sums), its log-sum-exp, then z - lse stored: two passes over the
  // row fewer, the same bits.
  if (on_logits) {
    for (int v = threadIdx.x; v < vocab; v += kChunkThreads) x[v] += bias ? bias[v] : 0.f;
    __syncthreads();
    for (int e = e0 + threadIdx.x; e < e1; e += kChunkThreads) edit_score(x[edit_tokens[e]], edit_factors[e]);
    if (device) history_edits(x, h, len, n, penalty);
    __syncthreads();
  }
  const float* b = on_logits ? nullptr : bias;  // greedy: added above
  // kEditBatch of a thread's tokens loaded before they are added (in the same order: the same
  // sum), so that their loads overlap: one load at a time left the launch latency-bound.
  constexpr int kEditBatch = 8;
  OnlineLse lse;
  for (int v0 = threadIdx.x; v0 < vocab; v0 += kEditBatch * kChunkThreads) {
    float z[kEditBatch];
#pragma unroll
    for (int u = 0; u < kEditBatch; ++u) {
      const int v = v0 + u * kChunkThreads;
      z[u] = v < vocab ? x[v] + (b ? b[v] : 0.f) : -INFINITY;  // -inf: add() skips it
    }
#pragma unroll
    for (int u = 0; u < kEditBatch; ++u) lse.add(z[u]);
  }
  const OnlineLse total = block_lse(lse);
  __shared__ float s_lse;
  if (threadIdx.x == 0) s_lse = total.m + logf(total.s);
  __syncthreads();
  const float row_lse = s_lse;
  for (int v0 = threadIdx.x; v0 < vocab; v0 += kEditBatch * kChunkThreads) {
    float z[kEditBatch];
#pragma unroll
    for (int u = 0; u < kEditBatch; ++u) {
      const int v = v0 + u * kChunkThreads;
      z[u] = v < vocab ? x[v] + (b ? b[v] : 0.f) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kEditBatch; ++u) {
      const int v = v0 + u * kChunkThreads;
      if (v < vocab) x[v] = z[u] - row_lse;
    }
  }
  __syncthreads();
  if (!on_logits) {
    for (int e = e0 + threadIdx.x; e < e1; e += kChunkThreads) edit_score(x[edit_tokens[e]], edit_factors[e]);
    if (device) history_edits(x, h, len, n, penalty);
  }
}

}  // namespace
}  // namespace cuda

void beam_token_edits_cuda(float* logits, int64_t logits_row_stride, const float* bias, int64_t sentences, int beam,
                           int vocab, const unsigned char* sentence_flags, const TokenEditTable* table,
                           int table_first_row, cudaStream_t stream, const DeviceHistory* history,
                           int max_positions) {
  if (sentences <= 0) return;
  if (logits_row_stride == 0) logits_row_stride = vocab;
  if (history && (!history->ngram || !history->penalty || !history->tokens || !history->key_rows ||
                  !history->cache_rows || !history->positions || !history->step_tokens || !history->follow ||
                  !history->follow_tokens || max_positions < 1))
    throw std::invalid_argument("beam_token_edits_cuda: a history needs all its arrays and max_positions");
  const size_t shared = history ? size_t(max_positions) * sizeof(int) : 0;
  cuda::launch(&cuda::token_edits_kernel, dim3(unsigned(sentences * beam)), dim3(cuda::kChunkThreads), shared, stream,
               logits, logits_row_stride, bias, beam, vocab, sentence_flags, table, table_first_row,
               history ? *history : DeviceHistory{});
}

template <typename T>
void beam_topk_cuda(const T* logits, const float* bias, const float* running_scores,
                    int64_t sentences, int beam, int vocab, int k, const TopkMasks& masks,
                    float* out_scores, int* out_index, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream, int64_t logits_row_stride, const NextRows* next) {
  if (sentences <= 0) return;
  if (next && (!next->cache_rows || !next->tokens || !next->parents || !next->running || masks.eos_id < 0 || beam > 32))
    throw std::invalid_argument("beam_topk_cuda: next rows need all four arrays, the EOS id and beam <= 32");
  if (logits_row_stride == 0) logits_row_stride = vocab;
  if (logits_row_stride < vocab)
    throw std::invalid_argument("beam_topk_cuda: logits_row_stride smaller than vocab");
  if (k < 1 || k > kMaxBeamTopk || int64_t(k) > int64_t(beam) * vocab)
    throw std::invalid_argument("beam_topk_cuda: k must be in [1, min(32, beam * vocab)]");
  if (workspace_bytes < beam_topk_workspace_bytes(sentences, beam, vocab, k))
    throw std::invalid_argument("beam_topk_cuda: workspace too small");
  auto go = [&](auto kp) {
    cuda::run<T, decltype(kp)::value>(logits, logits_row_stride, bias, running_scores, sentences,
                                      beam, vocab, k, masks, out_scores, out_index, workspace,
                                      stream, next ? *next : NextRows{});
  };
  switch (beam_topk_padded_k(k)) {
    case 1: go(std::integral_constant<int, 1>()); break;
    case 2: go(std::integral_constant<int, 2>()); break;
    case 4: go(std::integral_constant<int, 4>()); break;
    case 8: go(std::integral_constant<int, 8>()); break;
    case 16: go(std::integral_constant<int, 16>()); break;
    default: go(std::integral_constant<int, 32>()); break;
  }
}

#define NMT_INSTANTIATE(T)                                                                     \
  template void beam_topk_cuda<T>(const T*, const float*, const float*, int64_t, int, int, int, \
                                  const TopkMasks&, float*, int*, void*, size_t, cudaStream_t, \
                                  int64_t, const NextRows*);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
NMT_INSTANTIATE(__nv_bfloat16)
#undef NMT_INSTANTIATE

}  // namespace nmt::kernels
