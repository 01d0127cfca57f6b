// The 8-bit GEMMs' two ends (kernels/quantize.h): activations quantized per row on the fly
// (the weights' scheme, int8 or e4m3), and the int32 (or FP8 GEMM's float32) products scaled
// back to float16 or float32.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/quantize.h"

namespace nmt::kernels {
namespace {

constexpr int kRowWarps = 4;  // rows a block of the quantizer: a warp each

// q[r, :] = rint(x[r, :] / s), s = max |x[r, :]| / 127 (1 for an all-zero row): division, as
// quantize_rows_int8, so that the two agree bit for bit on the same float16 input; e4m3: s =
// max / 448, q = e4m3(x / s) rounded to nearest even (quantize_rows_e4m3).
template <bool kE4m3>
__global__ void __launch_bounds__(kRowWarps * 32)
    quantize_rows_kernel(const __half* x, int64_t ldx, int rows, int k, int8_t* q, float* scale) {
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * kRowWarps + threadIdx.x / 32;
  cuda::pdl_prologue();
  if (r >= rows) return;
  const __half* row = x + int64_t(r) * ldx;
  float amax = 0.f;
  for (int c = lane * 8; c < k; c += 32 * 8) {
    float v[8];
    cuda::load_pack<__half, 8>(row + c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = cuda::group_allreduce<32>(amax, cuda::MaxOp());
  const float s = amax > 0.f ? amax / (kE4m3 ? kE4m3Max : 127.f) : 1.f;
  if (lane == 0) scale[r] = s;
  int8_t* out = q + int64_t(r) * k;
  for (int c = lane * 8; c < k; c += 32 * 8) {
    float v[8];
    cuda::load_pack<__half, 8>(row + c, v);
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int b;
      if constexpr (kE4m3) b = int(__nv_cvt_float_to_fp8(v[i] / s, __NV_SATFINITE, __NV_E4M3));
      else b = int(rintf(fminf(fmaxf(v[i] / s, -127.f), 127.f)));
      w[i / 4] |= uint32_t(b & 0xff) << (8 * (i % 4));
    }
    *reinterpret_cast<uint2*>(out + c) = make_uint2(w[0], w[1]);
  }
}

// y[m, j] = act(acc[m, j] * xscale[m] * wscale[j] + bias[j]); acc and y may be the same memory
// (the float32 logits: each element read, then written, by one thread).
template <typename TY>
__global__ void rescale_kernel(const int32_t* acc, int64_t ldacc, const float* xscale, const float* wscale,
                               const __half* bias, bool has_act, Activation act, TY* y, int64_t ldy, int rows, int n) {
  cuda::pdl_prologue();
  const int64_t total = int64_t(rows) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t m = i / n;
    const int j = int(i % n);
    float v = float(acc[m * ldacc + j]) * xscale[m] * wscale[j];
    if (bias) v += __half2float(bias[j]);
    if (has_act) v = cuda::activate(v, act);
    y[m * ldy + j] = cuda::from_float<TY>(v);
  }
}

}  // namespace

Int8GemmMode int8_gemm_mode() {
  static const Int8GemmMode mode = [] {
    const char* v = std::getenv("NMT_CUDA_INT8_GEMM");
    if (!v || !*v || std::strcmp(v, "dequantize") == 0) return Int8GemmMode::kDequantize;
    if (std::strcmp(v, "tensor-cores") == 0) return Int8GemmMode::kTensorCores;
    throw std::invalid_argument(std::string("NMT_CUDA_INT8_GEMM: '") + v + "' is neither tensor-cores nor dequantize");
  }();
  return mode;
}

void int8_quantize_rows_cuda(const __half* x, int64_t ldx, int rows, int k, int8_t* q, float* scale,
                             cudaStream_t stream, WeightBytes bytes) {
  if (k % 8 || ldx % 8 || reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(q) % 8)
    throw std::invalid_argument("int8_quantize_rows_cuda: k and ldx must be multiples of 8, x and q aligned");
  if (rows <= 0) return;
  const dim3 grid((rows + kRowWarps - 1) / kRowWarps), block(kRowWarps * 32);
  if (bytes == WeightBytes::kE4m3) cuda::launch(quantize_rows_kernel<true>, grid, block, 0, stream, x, ldx, rows, k, q, scale);
  else cuda::launch(quantize_rows_kernel<false>, grid, block, 0, stream, x, ldx, rows, k, q, scale);
}

template <typename TY>
void int8_rescale_cuda(const int32_t* acc, int64_t ldacc, const float* xscale, const float* wscale, const __half* bias,
                       const Activation* act, TY* y, int64_t ldy, int rows, int n, cudaStream_t stream) {
  if (int64_t(rows) * n == 0) return;
  const int blocks = cuda::grid_for(int64_t(rows) * n, 256, 8);
  cuda::launch(rescale_kernel<TY>, dim3(blocks), dim3(256), 0, stream, acc, ldacc, xscale, wscale, bias, act != nullptr,
               act ? *act : Activation::kRelu, y, ldy, rows, n);
}

template void int8_rescale_cuda<__half>(const int32_t*, int64_t, const float*, const float*, const __half*,
                                        const Activation*, __half*, int64_t, int, int, cudaStream_t);
template void int8_rescale_cuda<float>(const int32_t*, int64_t, const float*, const float*, const __half*,
                                       const Activation*, float*, int64_t, int, int, cudaStream_t);

}  // namespace nmt::kernels
