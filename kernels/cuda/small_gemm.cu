// Few-row dense projection (kernels/small_gemm.h). A decode step at batch 1 multiplies 4 rows
// (beam 4) by each weight matrix: cuBLAS's smallest tiles then spend most of a launch on
// latency, and the fc1 bias + activation needs a launch of its own. 16-bit types run on tensor
// cores (small_gemm_mma_kernel below). In float32 a warp owns one output column: its 32 lanes
// stride along K in 16-byte packs of the weight row, each pack multiplied into all rows (x is
// small and stays in L1), then a butterfly reduction gives every lane the column's sums and
// lane m writes row m with the bias and activation applied. For long K a few
// warps share the column, each taking every few packs, and add their sums in shared memory.
// Launched with programmatic dependent launch (common.cuh), each lane loads its first weight
// packs before waiting for the previous kernel: the weights do not depend on it. With a
// SmallGemmNorm the block first normalizes the rows into shared memory (a warp per row, its
// gamma and beta read before the wait too) and multiplies from there.
#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/small_gemm.h"

namespace nmt::kernels {
namespace cuda {
namespace {

// Columns per block (a warp each, or kSplit warps each: by_split): 4 up to 4 rows, 8 at 8
// rows, where each block's LayerNorm prologue has more rows to normalize and fewer blocks repeat
// it (end-to-end run 28 on an H200: 8 and 16 rows +5-9% against 4 columns, 4 rows the same; 2
// columns lost 15-20%).
template <int kRows>
constexpr int kBlockColumns = kRows >= 8 ? 8 : 4;

template <typename T>
struct SmallGemmArgs {
  const T* x;
  const T* w;
  const T* bias;
  T* y;
  int64_t ldx, ldy;
  int rows, n, k;
  bool has_act;
  Activation act;
  SmallGemmNorm<T> norm;  // read by the kernels with kNormPacks > 0
};

// Lane's weight packs loaded before pdl_prologue(): they do not depend on the previous kernel,
// so with programmatic dependent launch their reads overlap its end (4 packs per lane cover
// K <= 1024 in 16-bit types, the whole row of most projections).
constexpr int kEarlyPacks = 4;

// acc[m] += w . x[m, k:k + kVec] for the rows present (x global or shared).
template <typename T, int kRows, int kVec>
__device__ __forceinline__ void multiply_rows(const T* x, int64_t ldx, int rows, const float* w, int k,
                                              float* acc) {
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    if (m < rows) {
      float xv[kVec];
      load_pack<T, kVec>(x + m * ldx + k, xv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[m] += w[e] * xv[e];
    }
  }
}

// z = x + residual + bias for the pack at column c of row m.
template <typename T, int kVec>
__device__ __forceinline__ void load_sum(const SmallGemmArgs<T>& a, int m, int c, float* z) {
  load_pack<T, kVec>(a.x + m * a.ldx + c, z);
  float t[kVec];
  if (a.norm.residual) {
    load_pack<T, kVec>(a.norm.residual + m * a.ldx + c, t);
#pragma unroll
    for (int i = 0; i < kVec; ++i) z[i] += t[i];
  }
  if (a.norm.bias) {
    load_pack<T, kVec>(a.norm.bias + c, t);
#pragma unroll
    for (int i = 0; i < kVec; ++i) z[i] += t[i];
  }
}

// The lane's gamma and beta packs of a LayerNorm prologue, read and converted to float32
// before pdl_prologue(): they do not depend on the previous kernel, and read after the row's
// statistics they were a second memory round trip on the kernel's chain (end-to-end run 37 on
// an H200: Transformer-base batch 1 6% shorter a step, batch 2 +5-6%).
// They stay in T until used (to_float is exact): in float32 a K-1024 row's 4 packs of each took
// 64 registers, which kept the 16-warp tensor-core kernel with its LayerNorm at one block an SM.
template <typename T, int kVec, int kPacks>
struct NormParams {
  Pack<T, kVec> g[kPacks], b[kPacks];
  __device__ void load(const SmallGemmArgs<T>& a) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int c = (p * 32 + lane) * kVec;
      if (c < a.k) {
        g[p] = *reinterpret_cast<const Pack<T, kVec>*>(a.norm.gamma + c);
        b[p] = *reinterpret_cast<const Pack<T, kVec>*>(a.norm.beta + c);
      }
    }
  }
};

// rows_out[m, :] = LN(x + residual + bias)[m, :] for every row, a warp per row holding the
// row in registers (kPacks 16-byte packs a lane). All loads of a row go out at once: one
// memory round trip after the wait. The statistics take two passes over the registers (the
// mean, then the squared deviations from it), each one sum across the lanes: a shorter chain
// than Welford's per-pack updates and Chan merges (layer_norm.cu's, for rows that do not fit
// in registers), as exact or more (run 37: 3% shorter steps at Transformer-base batch 1).
// Block 0 also writes a.norm.out (z itself with store_sum: a pre-norm residual stream).
template <typename T, int kVec, int kPacks, int kBlockWarps>
__device__ void normalize_rows(const SmallGemmArgs<T>& a, const NormParams<T, kVec, kPacks>& params, T* rows_out) {
  const int lane = threadIdx.x % 32;
  const bool write_out = blockIdx.x == 0 && a.norm.out;
  const bool write_sum = write_out && a.norm.store_sum, write_norm = write_out && !a.norm.store_sum;
  // The lane's pack p starts at column col(p); its valid packs form a prefix of its share.
  const auto col = [&](int p) { return (p * 32 + lane) * kVec; };
  const auto valid = [&](int p) { return col(p) < a.k; };
  for (int m = threadIdx.x / 32; m < a.rows; m += kBlockWarps) {
    float z[kPacks][kVec];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (valid(p)) load_sum<T, kVec>(a, m, col(p), z[p]);
    }
    if (write_sum) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        if (valid(p)) store_pack<T, kVec>(a.norm.out + m * a.ldx + col(p), z[p]);
      }
    }
    const auto lane_sum = [&](auto f) { return warp_row_sum(z, valid, f); };
    const float mean = lane_sum([](float v) { return v; }) / float(a.k);
    const float squares = lane_sum([&](float& v) {
      v -= mean;
      return v * v;
    });
    const float inv = rsqrtf(squares / float(a.k) + a.norm.eps);
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (!valid(p)) continue;
#pragma unroll
      for (int i = 0; i < kVec; ++i) z[p][i] = z[p][i] * inv * to_float(params.g[p].v[i]) + to_float(params.b[p].v[i]);
      store_pack<T, kVec>(rows_out + m * a.k + col(p), z[p]);
      if (write_norm) store_pack<T, kVec>(a.norm.out + m * a.ldx + col(p), z[p]);
    }
  }
  __syncthreads();
}

// The GEMM's input rows, from pdl_prologue() on: a.x as it is, or (kNormPacks > 0) LN(x +
// residual + bias) built by this block in dynamic shared memory, its gamma and beta read before
// the wait. ldx receives the rows' leading dimension. `line` names the calling kernel's wait in
// trace builds.
template <typename T, int kVec, int kNormPacks, int kBlockWarps>
__device__ __forceinline__ const T* input_rows(const SmallGemmArgs<T>& a, int64_t& ldx,
                                               uint32_t line = __builtin_LINE()) {
  NormParams<T, kVec, kNormPacks ? kNormPacks : 1> params;
  if constexpr (kNormPacks > 0) params.load(a);
  pdl_prologue(line);
  ldx = a.ldx;
  if constexpr (kNormPacks == 0) {
    return a.x;
  } else {
    extern __shared__ __align__(16) unsigned char small_gemm_rows_smem[];
    T* normalized = reinterpret_cast<T*>(small_gemm_rows_smem);
    normalize_rows<T, kVec, kNormPacks, kBlockWarps>(a, params, normalized);
    ldx = a.k;
    return normalized;
  }
}

// Warps that share one column (kSplit): each takes every kSplit-th 16-byte pack of the lanes'
// stride along K, and the column's sums are added across them in shared memory in warp order.
// A warp's work is a serial chain of a few hundred instructions at ~10 cycles each with one or
// two warps an SM scheduler (end-to-end run 34, ncu), so splitting K shortens the chain that a
// launch waits for; the split is chosen by K and the rows (by_split).
constexpr int kMaxSplit = 4;

// kRows: rows rounded up to a power of two (the accumulators are registers). kNormPacks > 0:
// the input is LN(x + residual + bias), built in dynamic shared memory ([rows][k]) by every
// block, kNormPacks packs of a row per lane. kSplit warps per column (kMaxSplit above).
template <typename T, int kRows, int kNormPacks, int kSplit>
__global__ void __launch_bounds__(kBlockColumns<kRows> * kSplit * 32) small_gemm_kernel(SmallGemmArgs<T> a) {
  constexpr int kVec = 16 / int(sizeof(T));
  constexpr int kCols = kBlockColumns<kRows>;
  const int lane = threadIdx.x % 32, warp = int(threadIdx.x) / 32;
  const int part = warp / kCols;  // which of the column's kSplit warps
  const int col = blockIdx.x * kCols + warp % kCols;
  const bool has_col = col < a.n;  // the same for the column's warps
  const T* w = a.w + int64_t(has_col ? col : 0) * a.k;
  // Pack i of this warp's lane starts at k_of(i); a lane's packs form a prefix of its K.
  const auto k_of = [&](int i) { return (lane + 32 * (part + kSplit * i)) * kVec; };
  float early[kEarlyPacks][kVec];
#pragma unroll
  for (int i = 0; i < kEarlyPacks; ++i) {
    if (k_of(i) < a.k) load_pack<T, kVec>(w + k_of(i), early[i]);
  }
  int64_t ldx;
  const T* x = input_rows<T, kVec, kNormPacks, kCols * kSplit>(a, ldx);
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.f;
  if (has_col) {
#pragma unroll
    for (int i = 0; i < kEarlyPacks; ++i) {
      if (k_of(i) < a.k) multiply_rows<T, kRows, kVec>(x, ldx, a.rows, early[i], k_of(i), acc);
    }
#pragma unroll 4
    for (int k = k_of(kEarlyPacks); k < a.k; k += 32 * kSplit * kVec) {
      float wv[kVec];
      load_pack<T, kVec>(w + k, wv);
      multiply_rows<T, kRows, kVec>(x, ldx, a.rows, wv, k, acc);
    }
  }
  float mine = 0.f;  // lane m keeps row m's sum
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const float sum = group_allreduce<32>(acc[m], SumOp());
    if (lane == m) mine = sum;
  }
  if constexpr (kSplit > 1) {
    __shared__ float parts[kSplit - 1][kCols][kRows];
    if (part > 0 && lane < kRows) parts[part - 1][warp % kCols][lane] = mine;
    __syncthreads();
    if (part > 0) return;
#pragma unroll
    for (int p = 0; p < kSplit - 1; ++p) mine += parts[p][warp][lane % kRows];
  }
  if (has_col && lane < a.rows) {
    float v = mine + (a.bias ? to_float(a.bias[col]) : 0.f);
    if (a.has_act) v = activate(v, a.act);
    a.y[lane * a.ldy + col] = from_float<T>(v);
  }
}

// ---- 16-bit types: the projection on tensor cores ----

// One block owns kColTiles x kMmaCols output columns; its warps split K into chunks of 32, warp
// w taking chunks w, w + warps, ..., each chunk two m16n8k16 MMAs a tile of 8 columns with
// float32 accumulators: A = the input rows (M: 16 rows an MMA, kRowGroups groups of 8 rows in
// all), B = a tile's columns of W (N = 8). Lane (g, t) = (lane / 4, lane % 4) loads one 16-byte
// pack of column g's weight row (of each tile) and one of row g's input at k = chunk * 32 + t * 8,
// and the two MMAs take its halves as the k pairs the fragment layout gives the lane: the order
// of k within a chunk is permuted, the same way for A and B, so the sum is the same dot product.
// Against the warp-a-column kernel (float32 FMAs, used for float) a warp's chain after the wait
// is a few dozen instructions instead of hundreds: end-to-end run 44. More tiles a block (the
// same sums for each column, in the same order) when a block of 8 columns would not fit the
// grid in one wave (launch_mma_tiles): NLLB's K-1024 projections with their LayerNorm run one 16-warp
// block an SM, and fc1's 512 blocks of 8 columns took four waves of one round trip each.
constexpr int kMmaCols = 8;
// Chunks a warp loads before pdl_prologue() (16 bytes each a lane and tile; the kernel's kEarly):
// all of them for the projections of Transformer-base and the demo model at the warp counts of
// by_mma_warps; two with more tiles (NLLB's K 1024 in 16 warps: all of them too), four for the
// 8-warp LayerNorm kernel of 4 tiles (launch_mma_tiles).
template <int kColTiles>
constexpr int kMmaEarly = kColTiles == 1 ? 4 : 2;

// One chunk of 32 k: lo = row g's pack, hi = row g + 8's, w = column g's. The fragment's k pairs
// (2t, 2t + 1) and (2t + 8, 2t + 9) are the pack's 32-bit words 0 and 1 (first MMA), 2 and 3
// (second).
template <typename T>
__device__ __forceinline__ void mma_chunk(float (&c)[4], const uint4& lo, const uint4& hi, const uint4& w) {
  mma_16816<T>(c, lo.x, hi.x, lo.y, hi.y, w.x, w.y);
  mma_16816<T>(c, lo.z, hi.z, lo.w, hi.w, w.z, w.w);
}

template <typename T, int kNormPacks, int kWarps, int kRowGroups, int kColTiles, int kEarly>
__global__ void __launch_bounds__(kWarps * 32) small_gemm_mma_kernel(SmallGemmArgs<T> a) {
  constexpr int kVec = 8;
  constexpr int kRowsMax = 8 * kRowGroups, kTiles = (kRowGroups + 1) / 2;  // MMAs of 16 rows
  constexpr int kCols = kMmaCols * kColTiles;
  static_assert(kRowsMax * kCols <= kWarps * 32, "the epilogue's threads");
  const int lane = threadIdx.x % 32, warp = int(threadIdx.x) / 32, g = lane / 4, t = lane % 4;
  const int col0 = int(blockIdx.x) * kCols;
  const T* w[kColTiles];
#pragma unroll
  for (int c = 0; c < kColTiles; ++c)  // past n: read, not stored
    w[c] = a.w + int64_t(min(col0 + c * kMmaCols + g, a.n - 1)) * a.k;
  const int chunks = (a.k + 31) / 32;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const auto k_of = [&](int chunk) { return chunk * 32 + t * 8; };
  const auto load_w = [&](int k, uint4 (&wv)[kColTiles]) {
#pragma unroll
    for (int c = 0; c < kColTiles; ++c) wv[c] = k < a.k ? *reinterpret_cast<const uint4*>(w[c] + k) : zero;
  };
  uint4 early[kEarly][kColTiles];
#pragma unroll
  for (int i = 0; i < kEarly; ++i) load_w(k_of(warp + kWarps * i), early[i]);
  // The epilogue: thread i writes row i / kCols, column col0 + i % kCols.
  const int out_row = int(threadIdx.x) / kCols, out_col = col0 + int(threadIdx.x) % kCols;
  const bool writes = out_row < a.rows && out_col < a.n;
  const float bias = writes && a.bias ? to_float(a.bias[out_col]) : 0.f;
  int64_t ldx;
  const T* x = input_rows<T, kVec, kNormPacks, kWarps>(a, ldx);
  const auto x_pack = [&](int row, int k) {
    return row < a.rows && k < a.k ? *reinterpret_cast<const uint4*>(x + row * ldx + k) : zero;
  };
  float c[kTiles][kColTiles][4] = {};
  const auto multiply = [&](int chunk, const uint4 (&wv)[kColTiles]) {
    const int k = k_of(chunk);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int row = 16 * j + g;
      const uint4 lo = x_pack(row, k), hi = row + 8 < kRowsMax ? x_pack(row + 8, k) : zero;
#pragma unroll
      for (int n = 0; n < kColTiles; ++n) mma_chunk<T>(c[j][n], lo, hi, wv[n]);
    }
  };
#pragma unroll
  for (int i = 0; i < kEarly; ++i) {
    const int chunk = warp + kWarps * i;
    if (chunk < chunks) multiply(chunk, early[i]);  // the same for the warp's lanes
  }
  for (int chunk = warp + kWarps * kEarly; chunk < chunks; chunk += kWarps) {
    uint4 wv[kColTiles];
    load_w(k_of(chunk), wv);
    multiply(chunk, wv);
  }
  // The warps' sums, added in warp order.
  __shared__ float parts[kWarps][kRowsMax][kCols];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int row = 16 * j + g;
#pragma unroll
    for (int n = 0; n < kColTiles; ++n) {
      parts[warp][row][n * kMmaCols + 2 * t] = c[j][n][0];
      parts[warp][row][n * kMmaCols + 2 * t + 1] = c[j][n][1];
      if (row + 8 < kRowsMax) {
        parts[warp][row + 8][n * kMmaCols + 2 * t] = c[j][n][2];
        parts[warp][row + 8][n * kMmaCols + 2 * t + 1] = c[j][n][3];
      }
    }
  }
  __syncthreads();
  if (!writes) return;
  float v = bias;
  const int cc = int(threadIdx.x) % kCols;
#pragma unroll
  for (int p = 0; p < kWarps; ++p) v += parts[p][out_row][cc];
  if (a.has_act) v = activate(v, a.act);
  a.y[out_row * a.ldy + out_col] = from_float<T>(v);
}

// ---- wide: the output projection (kernels/small_gemm.h, small_gemm_logits_cuda) ----

// Warps of a wide block, one block an SM. A warp owns groups of kWideCols consecutive columns
// for the kWideRows rows (fewer rows are computed as zero rows: they cost less than a warp's
// reads of more columns), so its 32 lanes end a group with one (column, row) sum each.
constexpr int kWideWarps = 8;
constexpr int kWideRows = kSmallGemmLogitsRows, kWideCols = 32 / kWideRows;

// Lane l of the warp ends with the sum over the warp's lanes of v[l]: five halving exchanges,
// each lane keeping the half its lane bit selects (31 shuffles for 32 sums, where a butterfly
// per value would take 160). kWidth: the exchange's lane bit, 16 down to 1.
template <int kWidth = 16>
__device__ __forceinline__ float transpose_reduce(float (&v)[32]) {
  const bool upper = threadIdx.x & kWidth;
#pragma unroll
  for (int i = 0; i < kWidth; ++i) {
    const float send = upper ? v[i] : v[i + kWidth];
    const float keep = upper ? v[i + kWidth] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kWidth);
  }
  if constexpr (kWidth > 1) return transpose_reduce<kWidth / 2>(v);
  return v[0];
}

// y[m, col] = x[m, :] . w[col, :] in float32. Persistent: each block normalizes the rows once
// (kNorm: the LayerNorm prologue, into shared memory), then each warp takes column groups
// gridDim.x * kWideWarps apart. A lane holds its kKPacks 16-byte packs of K for each of the
// group's columns (all of K: kKPacks * 32 packs); the next group's packs are read while the
// current one is multiplied and reduced where registers allow (kPrefetch), and the first
// group's before the wait. acc[column][row] accumulates; one transpose_reduce then leaves
// lane l the sum of column l / kR, row l % kR.
template <typename T, bool kNorm, int kKPacks>
__global__ void __launch_bounds__(kWideWarps * 32, 1) small_gemm_wide_kernel(SmallGemmArgs<T> a, float* y) {
  constexpr int kVec = 16 / int(sizeof(T));
  constexpr int kR = kWideRows, kC = kWideCols;
  constexpr bool kPrefetch = kC * kKPacks <= 16;  // two sets of packs within ~128 registers
  using P = Pack<T, kVec>;
  const int lane = threadIdx.x % 32;
  const int groups = (a.n + kC - 1) / kC, stride = int(gridDim.x) * kWideWarps;
  int group = int(blockIdx.x) * kWideWarps + int(threadIdx.x) / 32;
  const auto fetch = [&](int g, P (&p)[kC][kKPacks]) {
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const T* row = a.w + int64_t(min(g * kC + c, a.n - 1)) * a.k;  // past n: read, not stored
#pragma unroll
      for (int j = 0; j < kKPacks; ++j) {
        const int k = (lane + 32 * j) * kVec;
        if (k < a.k) p[c][j] = *reinterpret_cast<const P*>(row + k);
      }
    }
  };
  P cur[kC][kKPacks];
  if (group < groups) fetch(group, cur);
  NormParams<T, kVec, kKPacks> params;
  if constexpr (kNorm) params.load(a);
  pdl_prologue();
  const T* x = a.x;
  int64_t ldx = a.ldx;
  if constexpr (kNorm) {
    extern __shared__ __align__(16) unsigned char small_gemm_wide_smem[];
    T* normalized = reinterpret_cast<T*>(small_gemm_wide_smem);
    normalize_rows<T, kVec, kKPacks, kWideWarps>(a, params, normalized);
    x = normalized;
    ldx = a.k;
  }
  for (; group < groups; group += stride) {
    P next[kC][kKPacks];
    if constexpr (kPrefetch) {
      if (group + stride < groups) fetch(group + stride, next);
    }
    float acc[kC * kR];
#pragma unroll
    for (int i = 0; i < kC * kR; ++i) acc[i] = 0.f;
#pragma unroll
    for (int j = 0; j < kKPacks; ++j) {
      const int k = (lane + 32 * j) * kVec;
      if (k >= a.k) break;  // a lane's packs form a prefix of its K
      float xv[kR][kVec];
#pragma unroll
      for (int m = 0; m < kR; ++m) {
        if (m < a.rows) load_pack<T, kVec>(x + m * ldx + k, xv[m]);
        else
#pragma unroll
          for (int e = 0; e < kVec; ++e) xv[m][e] = 0.f;
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        float wc[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) wc[e] = to_float(cur[c][j].v[e]);
#pragma unroll
        for (int m = 0; m < kR; ++m)
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[c * kR + m] += wc[e] * xv[m][e];
      }
    }
    const float sum = transpose_reduce(acc);
    const int col = group * kC + lane / kR, row = lane % kR;
    if (row < a.rows && col < a.n) y[row * a.ldy + col] = sum;
    if constexpr (kPrefetch) {
#pragma unroll
      for (int c = 0; c < kC; ++c)
#pragma unroll
        for (int j = 0; j < kKPacks; ++j) cur[c][j] = next[c][j];
    } else if (group + stride < groups) {
      fetch(group + stride, cur);
    }
  }
}

// y[m, col] = x[m, :] . w[col, :] in float32 on tensor cores (16-bit types). Persistent, one block
// an SM as the float32 kernel above, the rows staged once into shared memory (normalized with
// kNorm); a warp owns groups of kMmaCols columns over all of K: lane (g, t) holds, for each of the
// kChunks chunks of 32 k, the 16-byte pack of column g at k = chunk * 32 + t * 8 (the fragment
// layout of small_gemm_mma_kernel, the rows' packs taken the same way), so one group is 2 x
// kChunks MMAs where the FMA kernel spent 32 x 8 FMAs a pack and lane. The FMAs, not the reads,
// were the float32 kernel's chain (bench/history/engine-cuda.md, runs 49 and 56). The next group's
// pack of a chunk is loaded into the register its MMA has just read, so a warp keeps all of a
// group's reads (16 KiB at K 1024) in flight while it multiplies: a ring of 8 loads a lane held
// too few. Two accumulators (even and odd chunks) halve the MMAs' chain.
template <typename T, bool kNorm, int kKPacks>
__global__ void __launch_bounds__(kWideWarps * 32, 1) small_gemm_wide_mma_kernel(SmallGemmArgs<T> a, float* y) {
  constexpr int kVec = 8;
  constexpr int kChunks = kKPacks * 32 * kVec / 32;  // chunks of 32 k that kKPacks packs a lane cover
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int groups = (a.n + kMmaCols - 1) / kMmaCols, stride = int(gridDim.x) * kWideWarps;
  int group = int(blockIdx.x) * kWideWarps + int(threadIdx.x) / 32;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const auto column = [&](int gr) { return a.w + int64_t(min(gr * kMmaCols + g, a.n - 1)) * a.k; };  // past n: read, not stored
  const auto k_of = [&](int chunk) { return chunk * 32 + t * 8; };
  uint4 w[kChunks];
  {
    const T* col = column(min(group, groups - 1));
#pragma unroll
    for (int j = 0; j < kChunks; ++j) w[j] = k_of(j) < a.k ? __ldcs(reinterpret_cast<const uint4*>(col + k_of(j))) : zero;
  }
  NormParams<T, kVec, kKPacks> params;
  if constexpr (kNorm) params.load(a);
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char small_gemm_wide_smem[];
  T* rows = reinterpret_cast<T*>(small_gemm_wide_smem);  // [a.rows][a.k]
  if constexpr (kNorm) {
    normalize_rows<T, kVec, kKPacks, kWideWarps>(a, params, rows);  // ends in __syncthreads
  } else {
    for (int i = int(threadIdx.x); i < a.rows * (a.k / kVec); i += kWideWarps * 32) {
      const int m = i / (a.k / kVec), c = (i % (a.k / kVec)) * kVec;
      *reinterpret_cast<uint4*>(rows + m * a.k + c) = *reinterpret_cast<const uint4*>(a.x + m * a.ldx + c);
    }
    __syncthreads();
  }
  const bool has_row = g < a.rows;
  for (; group < groups; group += stride) {
    const bool more = group + stride < groups;
    const T* next = column(more ? group + stride : group);
    float c[2][4] = {};
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int k = k_of(j);
      const uint4 x = has_row && k < a.k ? *reinterpret_cast<const uint4*>(rows + g * a.k + k) : zero;
      mma_chunk<T>(c[j % 2], x, zero, w[j]);
      if (more) w[j] = k < a.k ? __ldcs(reinterpret_cast<const uint4*>(next + k)) : zero;
    }
    // Lane (g, t) holds row g's columns 2t and 2t + 1 of the group (rows 8-15: the zero half).
    const int col = group * kMmaCols + 2 * t;
    if (has_row) {
      if (col < a.n) y[g * a.ldy + col] = c[0][0] + c[1][0];
      if (col + 1 < a.n) y[g * a.ldy + col + 1] = c[0][1] + c[1][1];
    }
  }
}

// 16-byte packs a lane when the 32 lanes of a warp stride along K.
template <typename T>
int lane_packs(int k) {
  constexpr int kVec = 16 / int(sizeof(T));
  return (k + 32 * kVec - 1) / (32 * kVec);
}

// f(P) with P the fewest of 1, 2 and 4 16-byte packs a lane that hold K: the LayerNorm
// prologue's row in registers, and the wide kernel's weights.
static_assert(kSmallGemmNormPacks == 4 && kSmallGemmLogitsPacks == 4, "by_k_packs' largest");
template <typename T, class F>
void by_k_packs(int k, F f) {
  const int packs = lane_packs<T>(k);
  if (packs <= 1) return f(std::integral_constant<int, 1>());
  if (packs <= 2) return f(std::integral_constant<int, 2>());
  f(std::integral_constant<int, 4>());
}

// Warps per column (kSplit) for K: enough that each warp's lanes hold at most split_packs
// 16-byte packs, up to kMaxSplit and 16 warps a block (more would cap the registers at 64 a
// thread and spill). End-to-end run 36 on an H200 against one warp a column (in float16, which
// this kernel served before the tensor-core kernel):
// - two packs a warp for 4 rows (Transformer-base's fc2, K 2048, in 4 warps): base batch 1
//   2.5-3% shorter; one pack a warp (every K 512 projection split too) was 5% longer;
// - one pack a warp for the plain kernels at 8 rows: base batch 2 +13%, demo batch 2 +7%;
// - the LayerNorm kernels at two packs a warp in both: splitting their K 512 cost 11% at 8 rows.
template <int kRows>
constexpr int split_packs(bool with_norm) {
  return kRows >= 8 && !with_norm ? 1 : 2;
}

template <typename T, int kRows, class F>
void by_split(int k, bool with_norm, F f) {
  constexpr int kMost = std::min(kMaxSplit, 16 / kBlockColumns<kRows>);
  const int most_a_warp = split_packs<kRows>(with_norm);
  const int needed = (lane_packs<T>(k) + most_a_warp - 1) / most_a_warp;  // warps a column
  if constexpr (kMost >= 4) {
    if (needed > 2) return f(std::integral_constant<int, 4>());
  }
  if constexpr (kMost >= 2) {
    if (needed > 1) return f(std::integral_constant<int, 2>());
  }
  f(std::integral_constant<int, 1>());
}

template <typename T, int kRows>
void launch_rows(const SmallGemmArgs<T>& a, bool with_norm, cudaStream_t stream) {
  const unsigned grid = unsigned((a.n + kBlockColumns<kRows> - 1) / kBlockColumns<kRows>);
  const size_t smem = size_t(kRows) * size_t(a.k) * sizeof(T);  // at most 8 x 128 packs: 16 KiB
  by_split<T, kRows>(a.k, with_norm, [&](auto split) {
    constexpr int kSplit = decltype(split)::value;
    const int threads = kBlockColumns<kRows> * kSplit * 32;
    if (!with_norm) return launch(&small_gemm_kernel<T, kRows, 0, kSplit>, grid, threads, 0, stream, a);
    by_k_packs<T>(a.k, [&](auto packs) {
      launch(&small_gemm_kernel<T, kRows, decltype(packs)::value, kSplit>, grid, threads, smem, stream, a);
    });
  });
}

// Warps a block of the tensor-core kernel: 8 up to 16 chunks of 32 k (K 512), 16 past that
// (two or more chunks a warp). End-to-end run 44 on an H200, float16: one chunk a warp
// (Transformer-base's K 512 in 16 warps) made its batch-1 step 11% longer, two chunks at the
// demo's K 256 (4 warps) cost its batches 2 and 4 9-10% against one, and four chunks a warp
// (K 512 in 4 warps) cost Transformer-base 4% at batch 1 and 14% at batch 4.
// Past 16 rows 16 warps, so that each normalizes 2 rows at most in a LayerNorm prologue (and
// the epilogue has a thread for each of 32 rows x 8 columns).
template <class F>
void by_mma_warps(int k, int rows, F f) {
  const int chunks = (k + 31) / 32;
  if (chunks > 16 || rows > 16) return f(std::integral_constant<int, 16>());
  f(std::integral_constant<int, 8>());
}

// Blocks of `kernel` resident on one SM with `threads` and `smem` (cached by kernel and smem:
// the launches of a step ask it at every capture, and without graphs at every step).
int resident_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, int> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, smem);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int blocks = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return cache[key] = std::max(blocks, 1);
}

// The fewest column tiles a block (1, 2 or 4 of kMmaCols) whose grid is one wave, or the most
// the epilogue's threads allow (kRowsMax x columns within 256) when none is.
template <typename T, int kNormPacks, int kWarps, int kGroups>
void launch_mma_tiles(const SmallGemmArgs<T>& a, size_t smem, cudaStream_t stream) {
  constexpr int kMostTiles = std::min(4, 256 / (8 * kMmaCols * kGroups));
  const int threads = kWarps * 32;
  const auto blocks = [&](int tiles) { return unsigned((a.n + kMmaCols * tiles - 1) / (kMmaCols * tiles)); };
  const auto one_wave = [&](const void* kernel, int tiles) {
    return int64_t(blocks(tiles)) <= int64_t(resident_blocks(kernel, threads, smem)) * num_sms();
  };
  const auto k1 = &small_gemm_mma_kernel<T, kNormPacks, kWarps, kGroups, 1, kMmaEarly<1>>;
  if (kMostTiles == 1 || one_wave(reinterpret_cast<const void*>(k1), 1)) {
    if constexpr (kWarps == 16 && kGroups == 1) {
      // NLLB's 1024-column projections at up to 8 rows (bench/history/engine-cuda.md, run 63:
      // the NLLB-600M batch-1 step 2.6% shorter with both). With a LayerNorm prologue of K 1024
      // the 16-warp kernel spills 48 bytes at its 128-register cap, the 8-warp one none, all 4
      // chunks a warp loaded before the wait. Without one, past K 2048 (fc2's 4096) a warp
      // loads all 8 of its chunks before the wait instead of 4.
      if constexpr (kNormPacks == 4)
        return launch(&small_gemm_mma_kernel<T, 4, 8, 1, 1, 4>, blocks(1), 8 * 32, smem, stream, a);
      if constexpr (kNormPacks == 0) {
        if ((a.k + 31) / 32 > kWarps * kMmaEarly<1>)
          return launch(&small_gemm_mma_kernel<T, 0, 16, 1, 1, 8>, blocks(1), threads, smem, stream, a);
      }
    }
    return launch(k1, blocks(1), threads, smem, stream, a);
  }
  if constexpr (kMostTiles >= 2) {
    const auto k2 = &small_gemm_mma_kernel<T, kNormPacks, kWarps, kGroups, 2, kMmaEarly<2>>;
    if (kMostTiles == 2 || one_wave(reinterpret_cast<const void*>(k2), 2))
      return launch(k2, blocks(2), threads, smem, stream, a);
  }
  if constexpr (kMostTiles >= 4) {
    if constexpr (kNormPacks > 0 && kWarps == 16 && kGroups == 1) {
      // With a LayerNorm prologue 4 tiles in 16 warps spill (the 128 registers a thread that
      // 512 threads leave: the row's gamma and beta, 2 chunks x 4 tiles of weights, the row
      // being normalized): 8 warps with all 4 chunks of K 1024 loaded before the wait do not
      // (NLLB-600M's fc1 and qkv; bench/history/engine-cuda.md runs 56 and 58). The warps' sums
      // are added in another grouping than 16 warps', so float16 results may differ from them in
      // the last bits (float32 takes small_gemm_kernel).
      return launch(&small_gemm_mma_kernel<T, kNormPacks, 8, kGroups, 4, 4>, blocks(4), 8 * 32, smem, stream, a);
    }
    launch(&small_gemm_mma_kernel<T, kNormPacks, kWarps, kGroups, 4, kMmaEarly<4>>, blocks(4), threads, smem, stream, a);
  }
}

template <typename T>
void launch_mma(const SmallGemmArgs<T>& a, bool with_norm, cudaStream_t stream) {
  const size_t smem = with_norm ? size_t(a.rows) * size_t(a.k) * sizeof(T) : 0;  // kSmallGemmNormBytes at most
  const auto go = [&](auto warps, auto groups) {
    constexpr int kWarps = decltype(warps)::value, kGroups = decltype(groups)::value;
    if (!with_norm) return launch_mma_tiles<T, 0, kWarps, kGroups>(a, 0, stream);
    by_k_packs<T>(a.k, [&](auto packs) { launch_mma_tiles<T, decltype(packs)::value, kWarps, kGroups>(a, smem, stream); });
  };
  by_mma_warps(a.k, a.rows, [&](auto warps) {
    if (a.rows > 16) return go(warps, std::integral_constant<int, 4>());
    if (a.rows > 8) return go(warps, std::integral_constant<int, 2>());
    go(warps, std::integral_constant<int, 1>());
  });
}

// One block an SM (fewer where the columns run out).
template <typename T>
void launch_wide(const SmallGemmArgs<T>& a, float* y, bool with_norm, cudaStream_t stream) {
  const int groups = (a.n + kWideCols - 1) / kWideCols;
  const unsigned grid = unsigned(std::min((groups + kWideWarps - 1) / kWideWarps, num_sms()));
  const int mma_groups = (a.n + kMmaCols - 1) / kMmaCols;
  const unsigned grid_mma = unsigned(std::min((mma_groups + kWideWarps - 1) / kWideWarps, num_sms()));
  const size_t smem = with_norm ? size_t(a.rows) * size_t(a.k) * sizeof(T) : 0;
  by_k_packs<T>(a.k, [&](auto packs) {
    constexpr int kKPacks = decltype(packs)::value;
    if constexpr (std::is_same_v<T, float>) {
      const auto kernel = with_norm ? &small_gemm_wide_kernel<T, true, kKPacks> : &small_gemm_wide_kernel<T, false, kKPacks>;
      launch(kernel, grid, kWideWarps * 32, smem, stream, a, y);
    } else {
      const auto kernel = with_norm ? &small_gemm_wide_mma_kernel<T, true, kKPacks> : &small_gemm_wide_mma_kernel<T, false, kKPacks>;
      launch(kernel, grid_mma, kWideWarps * 32, size_t(a.rows) * size_t(a.k) * sizeof(T), stream, a, y);
    }
  });
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f(kRows) with rows rounded up to the kernels' row counts: 1, 2, 4 or 8.
template <class F>
void by_rows_bucket(int rows, F f) {
  if (rows <= 1) return f(std::integral_constant<int, 1>());
  if (rows <= 2) return f(std::integral_constant<int, 2>());
  if (rows <= 4) return f(std::integral_constant<int, 4>());
  f(std::integral_constant<int, 8>());
}

}  // namespace
}  // namespace cuda

template <typename T>
bool small_gemm_supported(const T* x, int64_t ldx, const T* w, const T* bias, int64_t ldy,
                          int rows, int k, const SmallGemmNorm<T>* norm) {
  constexpr int kVec = 16 / int(sizeof(T));
  const bool plain = rows >= 1 && rows <= small_gemm_max_rows<T>() && k % kVec == 0 && ldx % kVec == 0 &&
                     ldy >= 1 && cuda::aligned(x) && cuda::aligned(w) && (!bias || cuda::aligned(bias));
  if (!plain || !norm) return plain;
  using cuda::aligned;
  return k <= kSmallGemmNormPacks * 32 * kVec && size_t(rows) * size_t(k) * sizeof(T) <= kSmallGemmNormBytes &&
         norm->gamma && norm->beta && aligned(norm->gamma) && aligned(norm->beta) &&
         (!norm->out || aligned(norm->out)) && (!norm->residual || aligned(norm->residual)) &&
         (!norm->bias || aligned(norm->bias));
}

template <typename T>
bool small_gemm_logits_supported(const T* x, int64_t ldx, const T* w, int64_t ldy, int rows, int k,
                                 const SmallGemmNorm<T>* norm) {
  constexpr int kVec = 16 / int(sizeof(T));
  return rows <= kSmallGemmLogitsRows && k <= kSmallGemmLogitsPacks * 32 * kVec &&
         small_gemm_supported<T>(x, ldx, w, nullptr, ldy, rows, k, norm);
}

namespace {
// Throws unless `supported` (the entry's own shape check) and norm.out is neither x nor the
// residual (other blocks still read them).
template <typename T>
void check_small_gemm(bool supported, const char* what, const T* x, const SmallGemmNorm<T>* norm) {
  if (!supported) throw std::invalid_argument(std::string(what) + ": unsupported shape or alignment");
  if (norm && norm->out && (norm->out == x || norm->out == norm->residual))
    throw std::invalid_argument(std::string(what) + ": norm.out must be neither x nor residual");
}
}  // namespace

template <typename T>
void small_gemm_cuda(const T* x, int64_t ldx, const T* w, const T* bias, T* y, int64_t ldy,
                     int rows, int n, int k, const Activation* act, cudaStream_t stream,
                     const SmallGemmNorm<T>* norm) {
  using namespace cuda;
  check_small_gemm(small_gemm_supported(x, ldx, w, bias, ldy, rows, k, norm), "small_gemm_cuda", x, norm);
  if (n <= 0) return;
  const SmallGemmArgs<T> a{x, w, bias, y, ldx, ldy, rows, n, k, act != nullptr,
                           act ? *act : Activation::kRelu, norm ? *norm : SmallGemmNorm<T>{}};
  const bool with_norm = norm != nullptr;
  if constexpr (std::is_same_v<T, float>) {
    by_rows_bucket(rows, [&](auto r) { launch_rows<T, decltype(r)::value>(a, with_norm, stream); });
  } else {
    launch_mma<T>(a, with_norm, stream);
  }
}

template <typename T>
void small_gemm_logits_cuda(const T* x, int64_t ldx, const T* w, float* y, int64_t ldy, int rows,
                            int n, int k, cudaStream_t stream, const SmallGemmNorm<T>* norm) {
  using namespace cuda;
  check_small_gemm(small_gemm_logits_supported(x, ldx, w, ldy, rows, k, norm), "small_gemm_logits_cuda", x, norm);
  if (n <= 0) return;
  const SmallGemmArgs<T> a{x, w, nullptr, nullptr, ldx, ldy, rows, n, k, false, Activation::kRelu,
                           norm ? *norm : SmallGemmNorm<T>{}};
  const bool with_norm = norm != nullptr;
  launch_wide<T>(a, y, with_norm, stream);
}

#define NMT_SMALL_GEMM(T)                                                                      \
  template bool small_gemm_supported<T>(const T*, int64_t, const T*, const T*, int64_t, int,  \
                                        int, const SmallGemmNorm<T>*);                         \
  template void small_gemm_cuda<T>(const T*, int64_t, const T*, const T*, T*, int64_t, int, int, \
                                   int, const Activation*, cudaStream_t, const SmallGemmNorm<T>*); \
  template bool small_gemm_logits_supported<T>(const T*, int64_t, const T*, int64_t, int, int, \
                                               const SmallGemmNorm<T>*);                        \
  template void small_gemm_logits_cuda<T>(const T*, int64_t, const T*, float*, int64_t, int, int, int, \
                                          cudaStream_t, const SmallGemmNorm<T>*);
NMT_SMALL_GEMM(float)
NMT_SMALL_GEMM(__half)
NMT_SMALL_GEMM(__nv_bfloat16)
#undef NMT_SMALL_GEMM

}  // namespace nmt::kernels
