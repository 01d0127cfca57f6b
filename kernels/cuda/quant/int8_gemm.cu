// Int8 weights on the GPU (kernels/quantize.h): the decode step's projections at up to 64 rows,
// converting the weights to float16 in registers for the tensor cores, and the dequantization
// to float16 for cuBLAS (NMT_CUDA_INT8_GEMM=dequantize).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

constexpr int kWarps = 8;   // a block's warps: they split K
constexpr int kCols = 16;   // weight rows (columns of y) a block: one mma's M
constexpr int kStep = 64;   // k a warp covers a step: 4 lanes x 16 int8, one 16-byte load a weight row
constexpr int kDepth = 4;   // steps whose weight loads a warp keeps in flight
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

// Two int8 of a word (bytes sel's) as an exact float16 pair: the byte, offset by 128, becomes
// the mantissa of 1024 + u (0x64uu), and 1152 comes off. Two instructions a pair, where I2F
// would be one a weight at a quarter of the FMA rate.
__device__ __forceinline__ uint32_t int8_pair_to_half2(uint32_t biased, uint32_t sel) {
  const uint32_t h = __byte_perm(biased, 0x64646464u, sel);
  const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __half2half2(__ushort_as_half(0x6480)));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two e4m3 (the low and high byte of `pair`) as a float16 pair: exact (cvt.rn.f16x2.e4m3x2
// on compute capability 8.9+).
__device__ __forceinline__ uint32_t e4m3_pair_to_half2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair & 0xffff), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// 16 weights (one 16-byte load, int8 or e4m3) as 8 float16 pairs, in k order.
template <bool kE4m3>
__device__ __forceinline__ void to_half2s(const uint4& v, uint32_t (&h)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kE4m3) {
      h[2 * i] = e4m3_pair_to_half2(w[i]);
      h[2 * i + 1] = e4m3_pair_to_half2(w[i] >> 16);
    } else {
      const uint32_t biased = w[i] ^ 0x80808080u;
      h[2 * i] = int8_pair_to_half2(biased, 0x4140);
      h[2 * i + 1] = int8_pair_to_half2(biased, 0x4342);
    }
  }
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

// y[row0 + r, col0 + c] for r < 8 NT (the block's row tile), c < 16 (the block's weight rows).
// K is split across the block's warps in steps of 64: warp w takes steps w, w + 8, ..., each
// lane (g = lane / 4, t = lane % 4) loading 16 int8 at k = 64 s + 16 t of weight rows col0 + g
// and col0 + g + 8, converting them to float16 pairs in registers and multiplying them on the
// tensor cores (mma m16n8k16, the weights as A, 8 x rows as B). The lane's 16 physical k are
// 4 mmas' k (2t, 2t+1, 2t+8, 2t+9): a permutation of k within the step, the same for A and B
// since both depend on t only, so the dot products are unchanged. The warps' partial sums
// meet in shared memory. Rows 1-8 cost the same conversions and one mma each; with NT = 2 a
// converted weight serves 16 rows.
template <typename TY, int NT, bool kNorm, bool kE4m3>
__global__ void __launch_bounds__(kWarps * 32) int8_gemv_kernel(const Args<TY> a) {
  constexpr int R = 8 * NT;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float partial[kWarps][NT * 4][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * R;
  const int rows = min(R, a.rows - row0);
  const int col0 = (blockIdx.z * gridDim.y + blockIdx.y) * kCols;
  const int steps = (a.k + kStep - 1) / kStep;
  const bool lo_ok = col0 + g < a.n, hi_ok = col0 + g + 8 < a.n;
  const int8_t* q_lo = a.q + int64_t(col0 + g) * a.k;
  const int8_t* q_hi = q_lo + int64_t(8) * a.k;
  const auto load_w = [&](int s, uint4 (&w)[2]) {
    const int kk = s * kStep + t * 16;
    const bool in = s < steps && kk < a.k;
    w[0] = in && lo_ok ? __ldg(reinterpret_cast<const uint4*>(q_lo + kk)) : make_uint4(0, 0, 0, 0);
    w[1] = in && hi_ok ? __ldg(reinterpret_cast<const uint4*>(q_hi + kk)) : make_uint4(0, 0, 0, 0);
  };
  // The first steps' weights before the wait: they do not depend on the previous kernel.
  uint4 buf[kDepth][2];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) load_w(warp + d * kWarps, buf[d]);
  cuda::pdl_prologue();
  const __half* x = a.x + int64_t(row0) * a.ldx;
  int64_t ldx = a.ldx;
  if constexpr (kNorm) {
    __half* xs = reinterpret_cast<__half*>(smem);
    normalize_rows(a, row0, rows, xs);
    x = xs;
    ldx = a.k;
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
  const auto multiply = [&](int s, const uint4 (&w)[2]) {
    if (s >= steps) return;  // the same for the whole warp: mma needs every lane
    const int kk = s * kStep + t * 16;
    uint32_t lo[8], hi[8];
    to_half2s<kE4m3>(w[0], lo);
    to_half2s<kE4m3>(w[1], hi);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int r = 8 * j + g;
      uint4 xa = make_uint4(0, 0, 0, 0), xb = xa;
      if (r < rows && kk < a.k) {
        const uint4* p = reinterpret_cast<const uint4*>(x + r * ldx + kk);
        xa = p[0];
        xb = p[1];
      }
      const uint32_t b[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int m = 0; m < 4; ++m)
        cuda::mma_16816<__half>(acc[j], lo[2 * m], hi[2 * m], lo[2 * m + 1], hi[2 * m + 1], b[2 * m], b[2 * m + 1]);
    }
  };
  const int my_steps = steps > warp ? (steps - warp + kWarps - 1) / kWarps : 0;
  for (int base = 0; base < my_steps; base += kDepth) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int s = warp + (base + d) * kWarps;
      const uint4 cur[2] = {buf[d][0], buf[d][1]};
      load_w(s + kDepth * kWarps, buf[d]);
      multiply(s, cur);
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][j * 4 + i][lane] = acc[j][i];
  __syncthreads();
  // Accumulator i of lane l, tile j: weight row g(l) (+8 for i >= 2), x row 8 j + 2 t(l) + i % 2.
  for (int e = threadIdx.x; e < NT * 4 * 32; e += kWarps * 32) {
    const int i = e / 32, l = e % 32;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += partial[w][i][l];
    const int c = i % 4, r = 8 * (i / 4) + (l % 4) * 2 + (c & 1), col = col0 + l / 4 + (c >= 2 ? 8 : 0);
    if (r >= rows || col >= a.n) continue;
    v *= a.scale[col];
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
// first read its weights from L2. Column blocks past 65535 (grid y's limit) fold into z; blocks
// past the last column write nothing.
template <typename TY, int NT, bool kE4m3>
void launch_tile(const Args<TY>& a, cudaStream_t stream) {
  constexpr int R = 8 * NT;
  const int col_blocks = (a.n + kCols - 1) / kCols;
  const int z = (col_blocks + 65534) / 65535;
  const dim3 grid((a.rows + R - 1) / R, (col_blocks + z - 1) / z, z);
  if (a.norm.gamma) {
    const size_t smem = size_t(R) * a.k * sizeof(__half);
    cuda::launch(int8_gemv_kernel<TY, NT, true, kE4m3>, grid, dim3(kWarps * 32), smem, stream, a);
  } else {
    cuda::launch(int8_gemv_kernel<TY, NT, false, kE4m3>, grid, dim3(kWarps * 32), 0, stream, a);
  }
}

template <typename TY>
void run(Args<TY> a, const SmallGemmNorm<__half>* norm, WeightBytes bytes, cudaStream_t stream) {
  if (!int8_gemv_supported(a.x, a.ldx, a.q, a.bias, a.rows, a.k, norm))
    throw std::invalid_argument("int8_gemv_cuda: unsupported shape (int8_gemv_supported)");
  if (norm && norm->out && (norm->out == a.x || norm->out == norm->residual))
    throw std::invalid_argument("int8_gemv_cuda: norm.out must be neither x nor residual");
  if (a.n <= 0) return;
  if (norm) a.norm = *norm;
  // One tile of 8 rows (an mma's N) up to 8 rows, else tiles of 16: each converted weight
  // serves two mmas, and the normalized rows (16 x 1024 float16) fit in shared memory.
  const bool e4m3 = bytes == WeightBytes::kE4m3;
  if (a.rows <= 8) e4m3 ? launch_tile<TY, 1, true>(a, stream) : launch_tile<TY, 1, false>(a, stream);
  else e4m3 ? launch_tile<TY, 2, true>(a, stream) : launch_tile<TY, 2, false>(a, stream);
}

template <bool kE4m3>
__global__ void dequantize_kernel(const int8_t* q, const float* scale, int64_t n, int64_t k, __half* w) {
  const int64_t packs = n * k / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += int64_t(gridDim.x) * blockDim.x) {
    const uint2 v = reinterpret_cast<const uint2*>(q)[i];
    const float s = scale[(i * 8) / k];
    const uint32_t words[2] = {v.x, v.y};
    cuda::Pack<__half, 8> out;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t b = (words[j / 4] >> (8 * (j % 4))) & 0xff;
      float f;
      if constexpr (kE4m3) f = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3)));
      else f = float(int8_t(b));
      out.v[j] = __float2half_rn(f * s);
    }
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
  if (rows < 1 || rows > kInt8GemvRows || k < 16 || k % 16 || ldx % 8 || !aligned(x) || !aligned(q) ||
      (bias && !aligned(bias)))
    return false;
  if (!norm) return true;
  return k <= kInt8GemvNormK && norm->gamma && norm->beta && aligned(norm->gamma) && aligned(norm->beta) &&
         (!norm->residual || aligned(norm->residual)) && (!norm->bias || aligned(norm->bias)) &&
         (!norm->out || aligned(norm->out));
}

void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, const __half* bias, __half* y,
                    int64_t ldy, int rows, int n, int k, const Activation* act, cudaStream_t stream,
                    const SmallGemmNorm<__half>* norm, WeightBytes bytes) {
  Args<__half> a{x, ldx, q, scale, bias, y, ldy, rows, n, k, act != nullptr, act ? *act : Activation::kRelu, {}};
  a.norm.gamma = nullptr;
  run(a, norm, bytes, stream);
}

void int8_gemv_cuda(const __half* x, int64_t ldx, const int8_t* q, const float* scale, float* y, int64_t ldy,
                    int rows, int n, int k, cudaStream_t stream, const SmallGemmNorm<__half>* norm,
                    WeightBytes bytes) {
  Args<float> a{x, ldx, q, scale, nullptr, y, ldy, rows, n, k, false, Activation::kRelu, {}};
  a.norm.gamma = nullptr;
  run(a, norm, bytes, stream);
}

void int8_dequantize_cuda(const int8_t* q, const float* scale, int64_t n, int64_t k, __half* w, cudaStream_t stream,
                          WeightBytes bytes) {
  if (k % 8 || !aligned(q) || !aligned(w)) throw std::invalid_argument("int8_dequantize_cuda: k % 8 or alignment");
  if (n * k == 0) return;
  const int blocks = cuda::grid_for(n * k / 8, 256, 8);
  if (bytes == WeightBytes::kE4m3) dequantize_kernel<true><<<blocks, 256, 0, stream>>>(q, scale, n, k, w);
  else dequantize_kernel<false><<<blocks, 256, 0, stream>>>(q, scale, n, k, w);
  cuda::check(cudaGetLastError(), "int8_dequantize_cuda");
}

}  // namespace nmt::kernels
