// Int8 weights on the GPU (kernels/quantize.h): the decode step's projections at a few rows,
// dequantizing in registers, and the dequantization to float16 for cuBLAS at more rows.
#include <cuda_fp16.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/quantize.h"

namespace nmt::kernels {
namespace {

using cuda::from_float;
using cuda::group_allreduce;
using cuda::SumOp;
using cuda::to_float;

constexpr int kWarps = 4;   // a block's warps
constexpr int kCols = 4;    // weight rows (columns of y) a warp streams
constexpr int kChunk = 16;  // int8 weights a lane loads at once: one 16-byte load a weight row
constexpr int kNormPacks = kInt8GemvNormK / (32 * 8);  // 8-half packs a lane holds of a normalized row

template <typename TY>
struct Args {
  const __half* x;
  int64_t ldx;
  const int8_t* q;
  const float* scale;
  const __half* bias;
  TY* y;
  int64_t ldy;
  int rows, n, k;
  bool has_act;
  Activation act;
  SmallGemmNorm<__half> norm;
};

// 16 int8 values (one 16-byte load) as float: exact.
__device__ __forceinline__ void to_floats(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) f[i * 4 + b] = float(int8_t((w[i] >> (8 * b)) & 0xff));
  }
}

// 16 halves at p (16-byte aligned) as float.
__device__ __forceinline__ void load16(const __half* p, float* f) {
  cuda::load_pack<__half, 8>(p, f);
  cuda::load_pack<__half, 8>(p + 8, f + 8);
}

// rows_out[r, :] = LN(x + residual + bias)[row0 + r, :] for the block's rows, a warp per row
// holding it in registers: small_gemm.cu's prologue (the same sums in the same order, the mean
// and the squared deviations in two passes). The first column block writes norm.out.
template <typename TY>
__device__ void normalize_rows(const Args<TY>& a, int row0, int rows, __half* rows_out) {
  const int lane = threadIdx.x % 32;
  const SmallGemmNorm<__half>& nm = a.norm;
  const bool write_out = blockIdx.y == 0 && blockIdx.z == 0 && nm.out;
  const auto col = [&](int p) { return (p * 32 + lane) * 8; };
  for (int r = threadIdx.x / 32; r < rows; r += kWarps) {
    const int64_t m = row0 + r;
    float z[kNormPacks][8];
#pragma unroll
    for (int p = 0; p < kNormPacks; ++p) {
      if (col(p) >= a.k) continue;
      cuda::load_pack<__half, 8>(a.x + m * a.ldx + col(p), z[p]);
      float t[8];
      if (nm.residual) {
        cuda::load_pack<__half, 8>(nm.residual + m * a.ldx + col(p), t);
#pragma unroll
        for (int i = 0; i < 8; ++i) z[p][i] += t[i];
      }
      if (nm.bias) {
        cuda::load_pack<__half, 8>(nm.bias + col(p), t);
#pragma unroll
        for (int i = 0; i < 8; ++i) z[p][i] += t[i];
      }
      if (write_out && nm.store_sum) cuda::store_pack<__half, 8>(nm.out + m * a.ldx + col(p), z[p]);
    }
    const auto lane_sum = [&](auto f) { return cuda::warp_row_sum(z, [&](int p) { return col(p) < a.k; }, f); };
    const float mean = lane_sum([](float v) { return v; }) / float(a.k);
    const float squares = lane_sum([&](float& v) {
      v -= mean;
      return v * v;
    });
    const float inv = rsqrtf(squares / float(a.k) + nm.eps);
#pragma unroll
    for (int p = 0; p < kNormPacks; ++p) {
      if (col(p) >= a.k) continue;
      float g[8], b[8];
      cuda::load_pack<__half, 8>(nm.gamma + col(p), g);
      cuda::load_pack<__half, 8>(nm.beta + col(p), b);
#pragma unroll
      for (int i = 0; i < 8; ++i) z[p][i] = z[p][i] * inv * g[i] + b[i];
      cuda::store_pack<__half, 8>(rows_out + int64_t(r) * a.k + col(p), z[p]);
      if (write_out && !nm.store_sum) cuda::store_pack<__half, 8>(nm.out + m * a.ldx + col(p), z[p]);
    }
  }
  __syncthreads();
}

// y[row0 + r, col0 + c] for r < R (the block's row tile), c < kCols (the warp's weight rows):
// each lane multiplies 16 consecutive k of each weight row a pass, the lanes covering 512 k,
// then a sum across the warp.
template <typename TY, int R, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32) int8_gemv_kernel(const Args<TY> a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row0 = blockIdx.x * R;
  const int rows = min(R, a.rows - row0);
  const int col0 = ((blockIdx.z * gridDim.y + blockIdx.y) * kWarps + warp) * kCols;
  const int passes = (a.k / kChunk + 31) / 32;
  const auto load_w = [&](int pass, uint4 (&w)[kCols]) {
    const int kk = (pass * 32 + lane) * kChunk;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = col0 + c;
      w[c] = pass < passes && kk < a.k && col < a.n ? __ldg(reinterpret_cast<const uint4*>(a.q + int64_t(col) * a.k + kk))
                                                    : make_uint4(0, 0, 0, 0);
    }
  };
  // The first two passes' weights before the wait: they do not depend on the previous kernel.
  uint4 wa[kCols], wb[kCols];
  load_w(0, wa);
  load_w(1, wb);
  cuda::pdl_prologue();
  const __half* x = a.x + int64_t(row0) * a.ldx;
  int64_t ldx = a.ldx;
  if constexpr (kNorm) {
    __half* xs = reinterpret_cast<__half*>(smem);
    normalize_rows(a, row0, rows, xs);
    x = xs;
    ldx = a.k;
  }
  float acc[R][kCols];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.f;
  const auto multiply = [&](int pass, const uint4 (&w)[kCols]) {
    const int kk = (pass * 32 + lane) * kChunk;
    if (pass >= passes || kk >= a.k) return;
    float wf[kCols][kChunk];
#pragma unroll
    for (int c = 0; c < kCols; ++c) to_floats(w[c], wf[c]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      float xv[kChunk];
      load16(x + r * ldx + kk, xv);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < kChunk; ++e) s = fmaf(xv[e], wf[c][e], s);
        acc[r][c] += s;
      }
    }
  };
  for (int pass = 0; pass < passes; pass += 2) {
    uint4 cur[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) cur[c] = wa[c];
    load_w(pass + 2, wa);
    multiply(pass, cur);
#pragma unroll
    for (int c = 0; c < kCols; ++c) cur[c] = wb[c];
    load_w(pass + 3, wb);
    multiply(pass + 1, cur);
  }
  // Every lane gets every sum; lane r * kCols + c writes y[row0 + r, col0 + c].
  float mine = 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float v = group_allreduce<32>(acc[r][c], SumOp());
      if (lane == r * kCols + c) mine = v;
    }
  const int r = lane / kCols, c = lane % kCols, col = col0 + c;
  if (lane < R * kCols && r < rows && col < a.n) {
    float v = mine * a.scale[col];
    if constexpr (sizeof(TY) == 2) {
      if (a.bias) v += __half2float(a.bias[col]);
      if (a.has_act) v = cuda::activate(v, a.act);
      a.y[int64_t(row0 + r) * a.ldy + col] = from_float<__half>(v);
    } else {
      a.y[int64_t(row0 + r) * a.ldy + col] = v;
    }
  }
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The row tiles are the grid's x: a column block's tiles start together, so that all but the
// first read its weights from L2. Column blocks past 65535 (grid y's limit) fold into z; warps
// past the last column write nothing.
template <typename TY, int R>
void launch_tile(const Args<TY>& a, cudaStream_t stream) {
  const int col_blocks = (a.n + kWarps * kCols - 1) / (kWarps * kCols);
  const int z = (col_blocks + 65534) / 65535;
  const dim3 grid((a.rows + R - 1) / R, (col_blocks + z - 1) / z, z);
  if (a.norm.gamma) {
    const size_t smem = size_t(R) * a.k * sizeof(__half);
    cuda::launch(int8_gemv_kernel<TY, R, true>, grid, dim3(kWarps * 32), smem, stream, a);
  } else {
    cuda::launch(int8_gemv_kernel<TY, R, false>, grid, dim3(kWarps * 32), 0, stream, a);
  }
}

template <typename TY>
void run(Args<TY> a, const SmallGemmNorm<__half>* norm, cudaStream_t stream) {
  if (!int8_gemv_supported(a.x, a.ldx, a.q, a.bias, a.rows, a.k, norm))
    throw std::invalid_argument("int8_gemv_cuda: unsupported shape (int8_gemv_supported)");
  if (norm && norm->out && (norm->out == a.x || norm->out == norm->residual))
    throw std::invalid_argument("int8_gemv_cuda: norm.out must be neither x nor residual");
  if (a.n <= 0) return;
  if (norm) a.norm = *norm;
  // Tiles of 4 rows for a batch-1 step at beam 4, else 8 (more accumulators a lane would take
  // the registers that keep two blocks an SM).
  if (a.rows <= 4) launch_tile<TY, 4>(a, stream);
  else launch_tile<TY, 8>(a, stream);
}

__global__ void dequantize_kernel(const int8_t* q, const float* scale, int64_t n, int64_t k, __half* w) {
  const int64_t packs = n * k / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += int64_t(gridDim.x) * blockDim.x) {
    const uint2 v = reinterpret_cast<const uint2*>(q)[i];
    const float s = scale[(i * 8) / k];
    const uint32_t words[2] = {v.x, v.y};
    cuda::Pack<__half, 8> out;
#pragma unroll
    for (int j = 0; j < 8; ++j) out.v[j] = __float2half_rn(float(int8_t((words[j / 4] >> (8 * (j % 4))) & 0xff)) * s);
    reinterpret_cast<cuda::Pack<__half, 8>*>(w)[i] = out;
  }
}

}  // namespace

int int8_gemv_rows() {
  static const int rows = [] {
    const char* v = std::getenv("NMT_CUDA_INT8_GEMV_ROWS");
    const int r = v ? std::atoi(v) : kInt8GemvDefaultRows;
    return r >= 0 && r <= kInt8GemvRows ? r : kInt8GemvDefaultRows;
  }();
  return rows;
}

bool int8_gemv_supported(const __half* x, int64_t ldx, const int8_t* q, const __half* bias, int rows, int k,
                         const SmallGemmNorm<__half>* norm) {
  if (rows < 1 || rows > kInt8GemvRows || k < kChunk || k % kChunk || ldx % 8 || !aligned(x) || !aligned(q) ||
      (bias && !aligned(bias)))
    return false;
  if (!norm) return true;
  return k <= kInt8GemvNormK && norm->gamma && norm->beta && aligned(norm->gamma) && aligned(norm->beta) &&
         (!norm->residual || aligned(norm->residual)) && (!norm->bias || aligned(norm->bias)) &&
         (!norm->out || aligned(norm->out));
}

void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, const __half* bias, __half* y,
                    int64_t ldy, int rows, int n, int k, const Activation* act, cudaStream_t stream,
                    const SmallGemmNorm<__half>* norm) {
  Args<__half> a{x, ldx, q, scale, bias, y, ldy, rows, n, k, act != nullptr, act ? *act : Activation::kRelu, {}};
  a.norm.gamma = nullptr;
  run(a, norm, stream);
}

void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, float* y, int64_t ldy,
                    int rows, int n, int k, cudaStream_t stream, const SmallGemmNorm<__half>* norm) {
  Args<float> a{x, ldx, q, scale, nullptr, y, ldy, rows, n, k, false, Activation::kRelu, {}};
  a.norm.gamma = nullptr;
  run(a, norm, stream);
}

void int8_dequantize_cuda(const int8_t* q, const float* scale, int64_t n, int64_t k, __half* w, cudaStream_t stream) {
  if (k % 8 || !aligned(q) || !aligned(w)) throw std::invalid_argument("int8_dequantize_cuda: k % 8 or alignment");
  if (n * k == 0) return;
  const int blocks = cuda::grid_for(n * k / 8, 256, 8);
  dequantize_kernel<<<blocks, 256, 0, stream>>>(q, scale, n, k, w);
  cuda::check(cudaGetLastError(), "int8_dequantize_cuda");
}

}  // namespace nmt::kernels
