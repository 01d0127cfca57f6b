// Multi-head attention (kernels/attention.h): three implementations behind one call.
//   decoder step (M = 1): one warp (two at small grids) per (batch, query, head), q.K^T ->
//                         mask -> softmax -> .V in one launch; the head dimension is a
//                         template (4 to 128). Also
//                         the only path for the fused q/v biases and kv_index (any M), and the
//                         core (warp_attend) of decoder_self_attention_cuda, which adds the
//                         KV-cache append and reads keys through the beam's key-row table.
//   tiled (small N):      one block per (query tile, head, batch) holding K^T, V, the query
//                         tile and its scores in shared memory; the tile height is a template
//                         chosen per shape class (8, 16, 32 query rows).
//   cuBLAS:               strided-batched Q.K^T (scale as alpha), our masked softmax, P.V.
// Head split/merge is fused everywhere through the strided layout of AttentionArgs.
#include <cublas_v2.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/softmax.h"

namespace nmt::kernels {
namespace cuda {
namespace {

// kL2: read through L2 only (ld.global.cg), as a decoder-step kernel does before waiting for
// the previous kernel (see HeldKeys below).
template <bool kL2 = false>
__device__ __forceinline__ int read_index(const int* p) {
  return kL2 ? __ldcg(p) : *p;
}

template <bool kL2 = false, typename T>
__device__ __forceinline__ int64_t kv_batch(const AttentionArgs<T>& a, int64_t b) {
  return a.kv_index ? read_index<kL2>(a.kv_index + b) : b / a.queries_per_kv;
}

template <bool kL2 = false, typename T>
__device__ __forceinline__ int64_t visible_keys(const AttentionArgs<T>& a, int64_t b,
                                                int64_t i) {
  int64_t n = a.kv_len;
  if (a.key_lengths) {
    const int64_t len = read_index<kL2>(a.key_lengths + kv_batch<kL2>(a, b));
    n = len < n ? len : n;
  }
  if (a.causal) {
    const int64_t len = i + a.causal_offset + 1;
    n = len < n ? len : n;
  }
  return n > 0 ? n : 0;
}

// ---- decoder step ---------------------------------------------------------------------------

constexpr int kStepWarps = 4;  // (batch, query, head) tasks per block

// Lane layout of the warp-per-(query, head) kernels: kLanesPerRow lanes hold one K/V row of
// head size kD in packs of kVec, so kRowsPerIter rows are read per step.
template <typename T, int kD>
struct StepLanes {
  // 16-byte packs, or the whole head row when it is smaller (head_dim 4 in 16-bit types).
  static constexpr int kVec = 16 / int(sizeof(T)) < kD ? 16 / int(sizeof(T)) : kD;
  static constexpr int kLanesPerRow = kD / kVec;
  static constexpr int kRowsPerIter = 32 / kLanesPerRow;
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0, "unsupported head_dim");
  int row_lane, d0;
  __device__ explicit StepLanes(int lane)
      : row_lane(lane / kLanesPerRow), d0(lane % kLanesPerRow * kVec) {}
  // The key this lane reads at the warp's step s when kSplit warps share a task (see
  // TaskWarps): warp `part` takes every kSplit-th step of kRowsPerIter consecutive keys.
  template <int kSplit>
  __device__ int64_t key(int64_t s, int part) const {
    return (int64_t(part) + int64_t(kSplit) * s) * kRowsPerIter + row_lane;
  }
  // The part whose warp reads key j (key's inverse).
  template <int kSplit>
  __device__ static int part_of(int j) {
    return j / kRowsPerIter % kSplit;
  }
};

// The warps of one (batch, query, head) task. kSplit > 1 at small grids: the task's keys are
// shared out between kSplit warps (StepLanes::key), each warp's serial chain of dots and value
// sums that much shorter; the warps meet at a named barrier of their own (ids 1..tasks a
// block, 0 is __syncthreads) and add their value sums in warp order.
template <int kSplit>
struct TaskWarps {
  static constexpr int kTasks = kStepWarps / kSplit;  // tasks a block
  int slot, part;  // the task's place in the block; this warp's share of it
  __device__ TaskWarps() : slot(int(threadIdx.x) / 32 % kTasks), part(int(threadIdx.x) / 32 / kTasks) {}
  __device__ void sync() const {
    if constexpr (kSplit == 1) {
      __syncwarp();
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(slot + 1), "r"(kSplit * 32) : "memory");
    }
  }
};

// Held keys: with AttentionArgs::kv_settled / DecoderSelfAttentionArgs::history_settled a
// step kernel loads each lane's packs of the first HeldKeys::kKeys<kSplit> keys' K and V rows into
// registers before waiting for the previous kernel, through L2 only (ld.global.cg: this SM's
// L1 may hold lines of an earlier grid until the wait). Under programmatic dependent launch
// those reads overlap the previous kernel, and after the wait only the query is a memory round
// trip away: at batch 1 the keys' two to four dependent rounds were most of the kernel. The
// lane holds exactly the (key, elements) it reads in warp_attend. Registers, not shared
// memory: a kernel that needs a larger shared-memory carveout than its neighbours cannot share
// their SMs, which undoes the overlap (a staging area of 32 KiB a block, end-to-end run 30,
// gained much less). Only for 16-byte packs (not head_dim 4 in 16-bit types; those kernels
// are compiled but never launched) and grids of one wave.
template <typename T, int kD>
struct HeldKeys {
  using L = StepLanes<T, kD>;
  static constexpr bool kPossible = L::kVec * int(sizeof(T)) == 16;
  static constexpr int kPacks = 8;  // of K and of V a warp: 64 registers
  // Keys a task holds: its kSplit warps' packs.
  template <int kSplit>
  static constexpr int kKeys = kPacks * L::kRowsPerIter * kSplit;
  Pack<T, L::kVec> k[kPacks], v[kPacks];
  int count = 0;  // keys held: j < count come from k / v

  // Key j's lane elements are at k_base + offset(j) and v_base + offset(j): K and V share the
  // row layout, so a key-row table is read once for both. Pack i holds the key of step i.
  template <int kSplit, class OffsetFn>
  __device__ __forceinline__ void load(int held, const T* k_base, const T* v_base, OffsetFn offset,
                                       const L& lanes, int part) {
    count = held;
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int j = int(lanes.template key<kSplit>(i, part));
      if (j < held) {
        const int64_t at = offset(j);
        k[i] = bit_cast_pack(__ldcg(reinterpret_cast<const uint4*>(k_base + at)));
        v[i] = bit_cast_pack(__ldcg(reinterpret_cast<const uint4*>(v_base + at)));
      }
    }
  }
  __device__ static Pack<T, L::kVec> bit_cast_pack(uint4 raw) {
    Pack<T, L::kVec> p;
    static_assert(sizeof(p) <= sizeof(raw), "a pack is at most 16 bytes");
    memcpy(&p, &raw, sizeof(p));
    return p;
  }
};

// A held pack's elements in float32.
template <typename T, int kVec>
__device__ __forceinline__ void unpack(const Pack<T, kVec>& pk, float* dst) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) dst[e] = to_float(pk.v[e]);
}

// The core of both decoder-step kernels, for one warp of a task (TaskWarps): out =
// softmax_j(q . K_j) V_j (+ v_bias) over j < n. q holds the lane's kVec elements (scaled);
// key(j) / value(j) point at the lane's elements of row j (called for j < n only, only for the
// warp's own keys, and not for held keys); p has n floats of the task's shared memory, merge
// (kSplit - 1) * kD. Scores: kRowsPerIter keys per step, four steps in flight; the lanes of
// row_lane 0 store. kHeld: the warp's first HeldKeys::kPacks steps are visited first in an
// unrolled pass (their packs indexed at compile time), each from `held` or from memory, in the
// same lane and order as the loops that follow, so the sums are the same either way. Only
// the task's warp of part 0 returns with `out` written.
template <typename T, int kD, bool kHeld, int kSplit, class KeyFn, class ValueFn>
__device__ __forceinline__ void warp_attend(const float* q, int64_t n, KeyFn key, ValueFn value,
                                            float* p, float* merge, const T* v_bias, T* out, int lane,
                                            const TaskWarps<kSplit>& task, const HeldKeys<T, kD>* held) {
  using L = StepLanes<T, kD>;
  using H = HeldKeys<T, kD>;
  constexpr int kVec = L::kVec, kRowsPerIter = L::kRowsPerIter;
  const L lanes(lane);
  constexpr int kUnroll = 4;
  const auto key_at = [&](int64_t s) { return lanes.template key<kSplit>(s, task.part); };
  // dot[u] of the keys of steps s0 + u, summed over the row's lanes and stored.
  auto store_scores = [&](float* dot, int64_t s0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      dot[u] = group_allreduce<L::kLanesPerRow>(dot[u], SumOp());
      const int64_t j = key_at(s0 + u);
      if (lanes.d0 == 0 && j < n) p[j] = dot[u];
    }
  };
  auto dot_of = [&](const float* kr) {
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < kVec; ++e) dot += q[e] * kr[e];
    return dot;
  };
  int64_t first = 0;  // the first step of the plain loops
  if constexpr (kHeld) {
    static_assert(H::kPacks % kUnroll == 0, "held packs come in whole steps");
#pragma unroll
    for (int i0 = 0; i0 < H::kPacks; i0 += kUnroll) {
      float dot[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = key_at(i0 + u);
        float kr[kVec];
        if (j < held->count) {
          unpack<T, kVec>(held->k[i0 + u], kr);
        } else if (j < n) {
          load_pack<T, kVec>(key(j), kr);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) kr[e] = 0.f;
        }
        dot[u] = dot_of(kr);
      }
      store_scores(dot, i0);
    }
    first = H::kPacks;
  }
  for (int64_t s0 = first; key_at(s0) - lanes.row_lane < n; s0 += kUnroll) {
    float dot[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = key_at(s0 + u);
      float kr[kVec];
      if (j < n) {
        load_pack<T, kVec>(key(j), kr);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) kr[e] = 0.f;
      }
      dot[u] = dot_of(kr);
    }
    store_scores(dot, s0);
  }
  task.sync();  // every score of the task stored
  // Every warp of the task reads all n scores, so max_v and sum are the same in each. With one
  // warp p[j] becomes exp(p[j] - max_v) for the value pass; shared by several, p stays (another
  // warp may still read it) and each warp recomputes the exponentials of its own keys.
  float max_v = -INFINITY;
  for (int64_t j = lane; j < n; j += 32) max_v = fmaxf(max_v, p[j]);
  max_v = group_allreduce<32>(max_v, MaxOp());
  float sum = 0.f;
  for (int64_t j = lane; j < n; j += 32) {
    const float e = expf(p[j] - max_v);
    if constexpr (kSplit == 1) p[j] = e;
    sum += e;
  }
  sum = group_allreduce<32>(sum, SumOp());
  __syncwarp();
  const auto weight = [&](int64_t j) { return kSplit == 1 ? p[j] : expf(p[j] - max_v); };

  float acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = 0.f;
  auto add_value = [&](const float* vr, float w) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] += w * vr[e];
  };
  if constexpr (kHeld) {
#pragma unroll
    for (int i = 0; i < H::kPacks; ++i) {
      const int64_t j = key_at(i);
      if (j >= n) break;
      float vr[kVec];
      if (j < held->count) {
        unpack<T, kVec>(held->v[i], vr);
      } else {
        load_pack<T, kVec>(value(j), vr);
      }
      add_value(vr, weight(j));
    }
  }
#pragma unroll 4
  for (int64_t j = key_at(first); j < n; j += kRowsPerIter * kSplit) {
    float vr[kVec];
    load_pack<T, kVec>(value(j), vr);
    add_value(vr, weight(j));
  }
#pragma unroll
  for (int mask = L::kLanesPerRow; mask < 32; mask *= 2) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], mask);
  }
  if constexpr (kSplit > 1) {  // the value sums of parts 1.. added to part 0's in order
    if (task.part > 0 && lanes.row_lane == 0) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) merge[(task.part - 1) * kD + lanes.d0 + e] = acc[e];
    }
    task.sync();
    if (task.part > 0) return;
    if (lanes.row_lane == 0) {
#pragma unroll
      for (int w = 0; w < kSplit - 1; ++w)
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] += merge[w * kD + lanes.d0 + e];
    }
  }
  if (lanes.row_lane == 0) {
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    float b[kVec];
    if (v_bias && n > 0) {
      load_pack<T, kVec>(v_bias, b);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) b[e] = 0.f;
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] = acc[e] * inv + b[e];
    store_pack<T, kVec>(out, acc);
  }
}

// q[0:kVec] = (src[0:kVec] + bias[0:kVec]) * scale (bias may be null).
template <typename T, int kVec>
__device__ __forceinline__ void load_query(const T* src, const T* bias, float scale, float* q) {
  load_pack<T, kVec>(src, q);
  float b[kVec];
  if (bias) {
    load_pack<T, kVec>(bias, b);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) b[e] = 0.f;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) q[e] = (q[e] + b[e]) * scale;
}

// kHeld: K/V settled, the first keys held before the wait (see HeldKeys). kSplit warps a task
// (TaskWarps).
template <typename T, int kD, bool kHeld, int kSplit>
__global__ void __launch_bounds__(kStepWarps * 32) attention_step_kernel(AttentionArgs<T> a) {
  if constexpr (!kHeld) pdl_prologue();
  using L = StepLanes<T, kD>;
  using W = TaskWarps<kSplit>;
  extern __shared__ float step_smem[];
  __shared__ float merge[W::kTasks][kSplit > 1 ? (kSplit - 1) * kD : 1];
  const W tw;
  const int lane = threadIdx.x % 32;
  const int64_t task = int64_t(blockIdx.x) * W::kTasks + tw.slot;
  if (task >= a.batch * a.q_len * a.heads) return;  // the task's warps leave together
  const int h = int(task % a.heads);
  const int64_t i = task / a.heads % a.q_len, b = task / a.heads / a.q_len;
  const int64_t kv = kv_batch<kHeld>(a, b);
  const int64_t n = visible_keys<kHeld>(a, b, i);
  const int d0 = L(lane).d0, hd = h * kD + d0;
  const int64_t kv_start = a.kv_starts ? int64_t(read_index<kHeld>(a.kv_starts + kv)) * a.kv_row_stride
                                       : kv * a.kv_batch_stride;
  const T* k_head = a.k + kv_start + hd;
  const T* v_head = a.v + kv_start + hd;
  auto key = [&](int64_t j) { return k_head + j * a.kv_row_stride; };
  auto value = [&](int64_t j) { return v_head + j * a.kv_row_stride; };
  HeldKeys<T, kD> held;
  if constexpr (kHeld) {
    constexpr int kKeys = HeldKeys<T, kD>::template kKeys<kSplit>;
    held.template load<kSplit>(int(n < kKeys ? n : kKeys), k_head, v_head,
                               [&](int j) { return int64_t(j) * a.kv_row_stride; }, L(lane), tw.part);
    pdl_prologue();
  }
  float q[L::kVec];
  load_query<T, L::kVec>(a.q + b * a.q_batch_stride + i * a.q_row_stride + hd,
                         a.q_bias ? a.q_bias + hd : nullptr, a.scale, q);
  warp_attend<T, kD, kHeld, kSplit>(q, n, key, value, step_smem + int64_t(tw.slot) * a.kv_len, merge[tw.slot],
                                    a.v_bias ? a.v_bias + hd : nullptr,
                                    a.out + b * a.out_batch_stride + i * a.out_row_stride + hd, lane, tw, &held);
}

// decoder_self_attention: the lanes of row_lane 0 of the warp that reads key t append the row's
// new key/value at position t's token (c's key-row table names it), then the task attends over
// positions 0..t through c's key-row table (each position's token is kept in shared memory for
// the value pass, by the warp that reads that key). kHeld: the history is settled, its first positions
// held before the wait (see HeldKeys). kSplit warps a task (TaskWarps).
template <typename T, int kD, bool kHeld, int kSplit>
__global__ void __launch_bounds__(kStepWarps * 32)
    decoder_self_attention_kernel(DecoderSelfAttentionArgs<T> a) {
  if constexpr (!kHeld) pdl_prologue();
  using L = StepLanes<T, kD>;
  using W = TaskWarps<kSplit>;
  constexpr int kVec = L::kVec;
  extern __shared__ float step_smem[];
  __shared__ float merge[W::kTasks][kSplit > 1 ? (kSplit - 1) * kD : 1];
  const W tw;
  const int lane = threadIdx.x % 32;
  const int64_t task = int64_t(blockIdx.x) * W::kTasks + tw.slot;
  if (task >= a.rows * a.heads) return;  // the task's warps leave together
  const int h = int(task % a.heads);
  const int64_t r = task / a.heads;
  const int t = read_index<kHeld>(a.positions ? a.positions + r : a.step);
  const int64_t own = a.cache_rows ? read_index<kHeld>(a.cache_rows + r) : r;
  const int64_t d = int64_t(a.heads) * kD, token_stride = a.token_stride ? a.token_stride : d;
  const L lanes(lane);
  const int64_t hd = int64_t(h) * kD + lanes.d0;
  const int* key_rows = a.key_rows + own * a.capacity;
  const int64_t written = read_index<kHeld>(key_rows + t);  // t's token, where this step writes
  HeldKeys<T, kD> held;
  if constexpr (kHeld) {
    // Past positions only: t's own is written below.
    constexpr int kKeys = HeldKeys<T, kD>::template kKeys<kSplit>;
    held.template load<kSplit>(t < kKeys ? t : kKeys, a.k_cache, a.v_cache,
                               [&](int j) { return int64_t(__ldcg(key_rows + j)) * token_stride + hd; },
                               lanes, tw.part);
    pdl_prologue();
  }
  const T* src = a.qkv + r * 3 * d + hd;
  float q[kVec];
  load_query<T, kVec>(src, a.bias + hd, a.scale, q);
  if (lanes.row_lane == 0 && L::template part_of<kSplit>(t) == tw.part) {
    float kv[kVec], b[kVec];
    const int64_t at = written * token_stride + hd;
    load_pack<T, kVec>(src + d, kv);
    load_pack<T, kVec>(a.bias + d + hd, b);
#pragma unroll
    for (int e = 0; e < kVec; ++e) kv[e] += b[e];
    store_pack<T, kVec>(a.k_cache + at, kv);
    load_pack<T, kVec>(src + 2 * d, kv);
    load_pack<T, kVec>(a.bias + 2 * d + hd, b);
#pragma unroll
    for (int e = 0; e < kVec; ++e) kv[e] += b[e];
    store_pack<T, kVec>(a.v_cache + at, kv);
  }
  __syncwarp();  // other lanes of this warp read the new key/value back below
  float* p = step_smem + int64_t(tw.slot) * 2 * a.capacity;
  int* cache_row = reinterpret_cast<int*>(p + a.capacity);
  warp_attend<T, kD, kHeld, kSplit>(
      q, int64_t(t) + 1,
      [&](int64_t j) {
        const int64_t kr = j == t ? written : key_rows[j];
        if (lanes.d0 == 0) cache_row[j] = int(kr);  // published by warp_attend's __syncwarp
        return a.k_cache + kr * token_stride + hd;
      },
      [&](int64_t j) { return a.v_cache + int64_t(cache_row[j]) * token_stride + hd; },
      p, merge[tw.slot], static_cast<const T*>(nullptr), a.out + r * d + hd, lane, tw, &held);
}

template <typename T>
bool aligned_16(const AttentionArgs<T>& a) {
  constexpr int kVec = 16 / int(sizeof(T));
  const void* ptrs[] = {a.q, a.k, a.v, a.out, a.q_bias, a.v_bias};
  for (const void* ptr : ptrs)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  const int64_t strides[] = {a.q_batch_stride,  a.q_row_stride,     a.kv_batch_stride,
                             a.kv_row_stride,   a.out_batch_stride, a.out_row_stride};
  for (int64_t s : strides)
    if (s % kVec != 0) return false;
  return true;
}

constexpr size_t kMaxSmem = 96 * 1024;  // keeps at least two blocks per SM on sm_80/sm_90

// Whether a step kernel of `blocks` blocks holds its first keys (see HeldKeys): settled inputs
// and one wave (larger grids keep their occupancy: the held packs take 64 registers).
template <typename T, int kD>
bool holds(bool settled, int64_t blocks) {
  return settled && HeldKeys<T, kD>::kPossible && blocks <= num_sms();
}

// Warps a task at small grids (TaskWarps). End-to-end run 36 on an H200 (float16, Transformer-base
// batch 1): the decoder self-attention 8.29 -> 6.32 us alone, the cross-attention (27 keys)
// 5.61 -> 5.49; the step 1.0-1.3% shorter in six rounds of six.
constexpr int kSplitWarps = 2;

// Launches kernel_for(kHeld, kSplit) over `tasks` tasks, `task_smem` bytes of dynamic shared
// memory each: the keys held when `settled` and the grid is one wave (holds), and split over
// kSplitWarps warps when that grid is one wave too.
template <typename T, int kD, class KernelFor, class Args>
void launch_step_kernel(KernelFor kernel_for, bool settled, int64_t tasks, size_t task_smem, cudaStream_t stream,
                        const Args& a) {
  const auto go = [&](auto kernel, int split) {
    const int tasks_a_block = kStepWarps / split;
    const size_t smem = size_t(tasks_a_block) * task_smem;
    if (smem > 48 * 1024)
      NMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch(kernel, unsigned((tasks + tasks_a_block - 1) / tasks_a_block), kStepWarps * 32, smem, stream, a);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  using One = std::integral_constant<int, 1>;
  using Split = std::integral_constant<int, kSplitWarps>;
  const int64_t blocks = (tasks + kStepWarps - 1) / kStepWarps;
  if (!holds<T, kD>(settled, blocks)) return go(kernel_for(No(), One()), 1);
  if ((tasks * kSplitWarps + kStepWarps - 1) / kStepWarps <= num_sms()) return go(kernel_for(Yes(), Split()), kSplitWarps);
  go(kernel_for(Yes(), One()), 1);
}

template <typename T, int kD>
void launch_step(const AttentionArgs<T>& a, cudaStream_t stream) {
  launch_step_kernel<T, kD>(
      [](auto held, auto split) { return &attention_step_kernel<T, kD, decltype(held)::value, decltype(split)::value>; },
      a.kv_settled, a.batch * a.q_len * a.heads, size_t(a.kv_len) * sizeof(float), stream, a);
}

// The head sizes the step kernels are instantiated for: Marian-base/big's 64, and the small
// ones of tiny test models (Transformer-big proportions at d_model 64 give 4).
inline bool step_head_dim(int d) { return d == 4 || d == 8 || d == 16 || d == 32 || d == 64 || d == 128; }

template <typename T>
bool step_fits(const AttentionArgs<T>& a) {
  const size_t smem = size_t(kStepWarps) * size_t(a.kv_len) * sizeof(float);
  return smem <= kMaxSmem && aligned_16(a) && step_head_dim(a.head_dim);
}

template <typename T>
void run_step(const AttentionArgs<T>& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 4: launch_step<T, 4>(a, stream); break;
    case 8: launch_step<T, 8>(a, stream); break;
    case 16: launch_step<T, 16>(a, stream); break;
    case 32: launch_step<T, 32>(a, stream); break;
    case 64: launch_step<T, 64>(a, stream); break;
    default: launch_step<T, 128>(a, stream); break;
  }
}

// ---- tiled ----------------------------------------------------------------------------------

constexpr int kTiledThreads = 128;

// Shared-memory plan of one tile: floats, padded by one column against bank conflicts.
struct TilePlan {
  int64_t q, kt, s, v;  // offsets of Q [TM][D+1], K^T [D][N+1], S [TM][N+1], V [N][D]
  size_t bytes;
  __host__ __device__ TilePlan(int tile_m, int64_t d, int64_t n, bool with_v) {
    q = 0;
    kt = q + tile_m * (d + 1);
    s = kt + d * (n + 1);
    v = s + tile_m * (n + 1);
    bytes = size_t(v + (with_v ? n * d : 0)) * sizeof(float);
  }
};

// Calls put(r, d, value) for the rows x D elements of a strided block of rows, with 16-byte
// loads when vec (D, the row stride and the pointer allow it), several loads in flight.
template <typename T, class Put>
__device__ __forceinline__ void load_rows(const T* src, int64_t row_stride, int rows, int D,
                                          bool vec, Put put) {
  constexpr int kVec = 16 / int(sizeof(T));
  if (vec) {
    const int packs = D / kVec, total = rows * packs;
#pragma unroll 4
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
      const int r = e / packs, d = (e - r * packs) * kVec;
      float v[kVec];
      load_pack<T, kVec>(src + r * row_stride + d, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) put(r, d + i, v[i]);
    }
  } else {
#pragma unroll 4
    for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
      const int r = e / D, d = e - r * D;
      put(r, d, to_float(src[r * row_stride + d]));
    }
  }
}

// Block (query tile, head, batch): S = scale * Q K^T (masked) into shared memory; then either
// S to global (kScoresOnly, layout [b][h][i][j]) or softmax(S) V to out.
template <typename T, int kTileM, bool kScoresOnly>
__global__ void __launch_bounds__(kTiledThreads) attention_tiled_kernel(AttentionArgs<T> a,
                                                                        T* scores, bool vec) {
  pdl_prologue();
  extern __shared__ float tile_smem[];
  const int D = a.head_dim;
  const int64_t N = a.kv_len;
  const TilePlan plan(kTileM, D, N, !kScoresOnly);
  float* qs = tile_smem + plan.q;
  float* kt = tile_smem + plan.kt;
  float* s = tile_smem + plan.s;
  float* vs = tile_smem + plan.v;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z, kv = b / a.queries_per_kv, i0 = int64_t(blockIdx.x) * kTileM;
  const int rows = int(a.q_len - i0 < kTileM ? a.q_len - i0 : kTileM);
  const T* q_tile = a.q + b * a.q_batch_stride + i0 * a.q_row_stride + int64_t(h) * D;
  const T* k_head = a.k + kv * a.kv_batch_stride + int64_t(h) * D;
  const T* v_head = a.v + kv * a.kv_batch_stride + int64_t(h) * D;

  const float scale = a.scale;
  load_rows(q_tile, a.q_row_stride, rows, D, vec,
            [&](int r, int d, float x) { qs[r * (D + 1) + d] = x * scale; });
  load_rows(k_head, a.kv_row_stride, int(N), D, vec,
            [&](int j, int d, float x) { kt[d * (N + 1) + j] = x; });
  if (!kScoresOnly)
    load_rows(v_head, a.kv_row_stride, int(N), D, vec, [&](int j, int d, float x) { vs[j * D + d] = x; });
  __syncthreads();

  for (int64_t e = threadIdx.x; e < rows * N; e += blockDim.x) {
    const int r = int(e / N);
    const int64_t j = e - int64_t(r) * N;
    float dot = -INFINITY;
    if (j < visible_keys(a, b, i0 + r)) {
      const float* qr = qs + r * (D + 1);
      const float* kc = kt + j;
      dot = 0.f;
#pragma unroll 8
      for (int d = 0; d < D; ++d) dot += qr[d] * kc[d * (N + 1)];
    }
    if (kScoresOnly)
      scores[((b * a.heads + h) * a.q_len + i0 + r) * N + j] = from_float<T>(dot);
    else
      s[r * (N + 1) + j] = dot;
  }
  if (kScoresOnly) return;
  __syncthreads();

  // softmax per row, one warp per row; the row's 1/sum is kept in its first padding slot
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += kTiledThreads / 32) {
    float* sr = s + r * (N + 1);
    const int64_t n = visible_keys(a, b, i0 + r);
    float max_v = -INFINITY;
    for (int64_t j = lane; j < n; j += 32) max_v = fmaxf(max_v, sr[j]);
    max_v = group_allreduce<32>(max_v, MaxOp());
    float sum = 0.f;
    for (int64_t j = lane; j < n; j += 32) {
      const float e = expf(sr[j] - max_v);
      sr[j] = e;
      sum += e;
    }
    sum = group_allreduce<32>(sum, SumOp());
    if (lane == 0) sr[N] = sum > 0.f ? 1.f / sum : 0.f;
  }
  __syncthreads();

  for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int r = e / D, d = e - r * D;
    const float* sr = s + r * (N + 1);
    const int64_t n = visible_keys(a, b, i0 + r);
    float acc = 0.f;
#pragma unroll 4
    for (int64_t j = 0; j < n; ++j) acc += sr[j] * vs[j * D + d];
    a.out[b * a.out_batch_stride + (i0 + r) * a.out_row_stride + int64_t(h) * D + d] =
        from_float<T>(acc * sr[N]);
  }
}

template <typename T, int kTileM, bool kScoresOnly>
void launch_tiled(const AttentionArgs<T>& a, T* scores, size_t smem, cudaStream_t stream) {
  const auto kernel = &attention_tiled_kernel<T, kTileM, kScoresOnly>;
  if (smem > 48 * 1024)
    NMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(smem)));
  const dim3 grid(unsigned((a.q_len + kTileM - 1) / kTileM), unsigned(a.heads),
                  unsigned(a.batch));
  constexpr int kVec = 16 / int(sizeof(T));
  const bool vec = a.head_dim % kVec == 0 && aligned_16(a);
  launch(kernel, grid, kTiledThreads, smem, stream, a, scores, vec);
}

// Shape classes: the tile height follows M (8, 16 or 32 query rows per block).
int tile_rows(int64_t m) { return m <= 8 ? 8 : m <= 16 ? 16 : 32; }

template <typename T>
bool tiled_fits(const AttentionArgs<T>& a, bool scores_only) {
  const size_t smem = TilePlan(tile_rows(a.q_len), a.head_dim, a.kv_len, !scores_only).bytes;
  return smem <= kMaxSmem && a.batch <= 65535 && a.heads <= 65535;
}

template <typename T, bool kScoresOnly>
void run_tiled(const AttentionArgs<T>& a, T* scores, cudaStream_t stream) {
  const int tile_m = tile_rows(a.q_len);
  const size_t smem = TilePlan(tile_m, a.head_dim, a.kv_len, !kScoresOnly).bytes;
  switch (tile_m) {
    case 8: launch_tiled<T, 8, kScoresOnly>(a, scores, smem, stream); break;
    case 16: launch_tiled<T, 16, kScoresOnly>(a, scores, smem, stream); break;
    default: launch_tiled<T, 32, kScoresOnly>(a, scores, smem, stream); break;
  }
}

// ---- cuBLAS ---------------------------------------------------------------------------------

cublasHandle_t cublas_handle(cudaStream_t stream) {
  struct Handles {
    std::array<cublasHandle_t, 64> h{};
    ~Handles() {
      for (auto x : h)
        if (x) cublasDestroy(x);
    }
  };
  thread_local Handles handles;
  int dev = 0;
  NMT_CUDA_CHECK(cudaGetDevice(&dev));
  cublasHandle_t& h = handles.h.at(size_t(dev));
  if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasSetStream");
  return h;
}

template <typename T>
cudaDataType_t cuda_type();
template <>
cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
cudaDataType_t cuda_type<__half>() { return CUDA_R_16F; }
template <>
cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(st)));
}

// Scratch of at least `bytes`: the caller's workspace, or stream-ordered memory freed by the
// destructor (after the work queued on the stream).
struct Scratch {
  void* ptr = nullptr;
  bool owned = false;
  cudaStream_t stream;
  Scratch(void* ws, size_t ws_bytes, size_t bytes, cudaStream_t s) : stream(s) {
    if (ws && ws_bytes >= bytes) {
      ptr = ws;
    } else {
      NMT_CUDA_CHECK(cudaMallocAsync(&ptr, bytes, s));
      owned = true;
    }
  }
  ~Scratch() {
    if (owned) cudaFreeAsync(ptr, stream);
  }
};

// S[b][h] (M x N, row-major) = alpha * Q_bh K_kv,h^T for every (b, h), in heads x
// queries_per_kv calls of strided-batched GEMM over the kv batches (column-major view:
// S^T = K Q^T with K^T and Q^T seen as D x N and D x M matrices of leading dim row_stride).
template <typename T>
void cublas_scores(const AttentionArgs<T>& a, T* s, float alpha, cudaStream_t stream) {
  cublasHandle_t handle = cublas_handle(stream);
  const float zero = 0.f;
  const int64_t mn = a.q_len * a.kv_len;
  for (int h = 0; h < a.heads; ++h) {
    for (int64_t r = 0; r < a.queries_per_kv && r < a.batch; ++r) {
      const int64_t count = (a.batch - r + a.queries_per_kv - 1) / a.queries_per_kv;
      check_cublas(
          cublasGemmStridedBatchedEx(
              handle, CUBLAS_OP_T, CUBLAS_OP_N, int(a.kv_len), int(a.q_len), a.head_dim, &alpha,
              a.k + int64_t(h) * a.head_dim, cuda_type<T>(), int(a.kv_row_stride),
              a.kv_batch_stride, a.q + r * a.q_batch_stride + int64_t(h) * a.head_dim,
              cuda_type<T>(), int(a.q_row_stride), a.q_batch_stride * a.queries_per_kv, &zero,
              s + (r * a.heads + h) * mn, cuda_type<T>(), int(a.kv_len),
              mn * a.heads * a.queries_per_kv, int(count), CUBLAS_COMPUTE_32F,
              CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx(QK^T)");
    }
  }
}

// out_bh (M x D) = P_bh V_kv,h (column-major: O^T = V^T P^T).
template <typename T>
void cublas_pv(const AttentionArgs<T>& a, const T* p, cudaStream_t stream) {
  cublasHandle_t handle = cublas_handle(stream);
  const float one = 1.f, zero = 0.f;
  const int64_t mn = a.q_len * a.kv_len;
  for (int h = 0; h < a.heads; ++h) {
    for (int64_t r = 0; r < a.queries_per_kv && r < a.batch; ++r) {
      const int64_t count = (a.batch - r + a.queries_per_kv - 1) / a.queries_per_kv;
      check_cublas(
          cublasGemmStridedBatchedEx(
              handle, CUBLAS_OP_N, CUBLAS_OP_N, a.head_dim, int(a.q_len), int(a.kv_len), &one,
              a.v + int64_t(h) * a.head_dim, cuda_type<T>(), int(a.kv_row_stride),
              a.kv_batch_stride, p + (r * a.heads + h) * mn, cuda_type<T>(), int(a.kv_len),
              mn * a.heads * a.queries_per_kv, &zero,
              a.out + r * a.out_batch_stride + int64_t(h) * a.head_dim, cuda_type<T>(),
              int(a.out_row_stride), a.out_batch_stride * a.queries_per_kv, int(count),
              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx(PV)");
    }
  }
}

template <typename T>
SoftmaxOptions attention_softmax_options(const AttentionArgs<T>& a) {
  SoftmaxOptions opt;
  opt.key_lengths = a.key_lengths;
  opt.rows_per_length = a.queries_per_kv * a.heads * a.q_len;
  if (a.causal) {
    opt.causal_rows = a.q_len;
    opt.causal_offset = a.causal_offset;
  }
  return opt;
}

template <typename T>
void run_cublas(const AttentionArgs<T>& a, cudaStream_t stream) {
  const size_t bytes =
      attention_workspace_bytes(a.batch, a.heads, a.q_len, a.kv_len, sizeof(T));
  Scratch scratch(a.workspace, a.workspace_bytes, bytes, stream);
  T* s = static_cast<T*>(scratch.ptr);
  cublas_scores(a, s, a.scale, stream);
  softmax_cuda(s, s, a.batch * a.heads * a.q_len, a.kv_len, attention_softmax_options(a),
               stream);
  cublas_pv(a, s, stream);
}

// Masks cuBLAS scores in place ([b][h][i][j], -inf where key j is hidden from query i).
template <typename T>
__global__ void mask_scores_kernel(AttentionArgs<T> a, T* s) {
  pdl_prologue();
  const int64_t total = a.batch * a.heads * a.q_len * a.kv_len;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % a.kv_len, row = e / a.kv_len;
    const int64_t i = row % a.q_len, b = row / a.q_len / a.heads;
    if (j >= visible_keys(a, b, i)) s[e] = from_float<T>(-INFINITY);
  }
}

}  // namespace
}  // namespace cuda

template <typename T>
AttentionPath attention_chosen_path(const AttentionArgs<T>& a) {
  using namespace cuda;
  if (a.q_bias || a.v_bias || a.kv_index || a.kv_starts) {  // only the decoder-step kernel fuses these
    if (!step_fits(a))
      throw std::invalid_argument(
          "attention_cuda: q_bias / v_bias / kv_index need head_dim 4, 8, 16, 32, 64 or 128, 16-byte "
          "aligned pointers and strides, and kv_len <= 6144");
    return AttentionPath::kDecoderStep;
  }
  const bool step = a.path == AttentionPath::kDecoderStep ||
                    (a.path == AttentionPath::kAuto && a.q_len == 1);
  if (step && step_fits(a)) return AttentionPath::kDecoderStep;
  if (a.path != AttentionPath::kCublas && tiled_fits(a, false)) return AttentionPath::kTiled;
  return AttentionPath::kCublas;
}

template <typename T>
void attention_cuda(const AttentionArgs<T>& a, cudaStream_t stream) {
  using namespace cuda;
  if (a.batch <= 0 || a.heads <= 0 || a.q_len <= 0) return;
  switch (attention_chosen_path(a)) {
    case AttentionPath::kDecoderStep: run_step(a, stream); break;
    case AttentionPath::kTiled: run_tiled<T, false>(a, nullptr, stream); break;
    default: run_cublas(a, stream); break;
  }
}

template <typename T>
void attention_scores_cuda(const AttentionArgs<T>& a, T* scores, cudaStream_t stream) {
  using namespace cuda;
  if (a.q_bias || a.v_bias || a.kv_index || a.kv_starts)
    throw std::invalid_argument("attention_scores_cuda takes no biases, no kv_index and no kv_starts");
  if (a.batch <= 0 || a.heads <= 0 || a.q_len <= 0 || a.kv_len <= 0) return;
  if (a.path != AttentionPath::kCublas && tiled_fits(a, true)) {
    run_tiled<T, true>(a, scores, stream);
    return;
  }
  cublas_scores(a, scores, a.scale, stream);
  if (a.key_lengths || a.causal) {
    const int64_t total = a.batch * a.heads * a.q_len * a.kv_len;
    launch(&mask_scores_kernel<T>, grid_for(total, 256, 8), 256, 0, stream, a, scores);
  }
}

template <typename T>
void decoder_self_attention_cuda(const DecoderSelfAttentionArgs<T>& a, cudaStream_t stream) {
  using namespace cuda;
  if (a.rows <= 0 || a.heads <= 0) return;
  const void* ptrs[] = {a.qkv, a.bias, a.k_cache, a.v_cache, a.out};
  bool ok = step_head_dim(a.head_dim);
  for (const void* ptr : ptrs) ok = ok && reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
  ok = ok && a.token_stride % int64_t(16 / sizeof(T)) == 0;
  const size_t smem = size_t(kStepWarps) * 2 * size_t(a.capacity) * sizeof(float);
  if (!ok || a.capacity <= 0 || smem > kMaxSmem)
    throw std::invalid_argument(
        "decoder_self_attention_cuda: head_dim must be 4, 8, 16, 32, 64 or 128, pointers and token_stride 16-byte "
        "aligned, capacity in [1, 6144]");
  auto go = [&](auto hd) {
    constexpr int kD = decltype(hd)::value;
    launch_step_kernel<T, kD>(
        [](auto held, auto split) {
          return &decoder_self_attention_kernel<T, kD, decltype(held)::value, decltype(split)::value>;
        },
        a.history_settled, a.rows * a.heads, 2 * size_t(a.capacity) * sizeof(float), stream, a);
  };
  switch (a.head_dim) {
    case 4: go(std::integral_constant<int, 4>()); break;
    case 8: go(std::integral_constant<int, 8>()); break;
    case 16: go(std::integral_constant<int, 16>()); break;
    case 32: go(std::integral_constant<int, 32>()); break;
    case 64: go(std::integral_constant<int, 64>()); break;
    default: go(std::integral_constant<int, 128>()); break;
  }
}

#define NMT_INSTANTIATE(T)                                                                     \
  template void decoder_self_attention_cuda<T>(const DecoderSelfAttentionArgs<T>&,            \
                                               cudaStream_t);                                  \
  template void attention_cuda<T>(const AttentionArgs<T>&, cudaStream_t);                     \
  template AttentionPath attention_chosen_path<T>(const AttentionArgs<T>&);                   \
  template void attention_scores_cuda<T>(const AttentionArgs<T>&, T*, cudaStream_t);
NMT_INSTANTIATE(float)
NMT_INSTANTIATE(__half)
NMT_INSTANTIATE(__nv_bfloat16)
#undef NMT_INSTANTIATE

}  // namespace nmt::kernels
