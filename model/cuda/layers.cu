#include "model/cuda/layers.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/layer_norm.h"
#include "kernels/quantize.h"
#include "model/cuda/device/device_memory.h"
#include "model/error.h"

namespace nmt::cuda {
template <typename T>
template <typename TC>
void Layers<T>::gemm(const T* x, int64_t ldx, const T* w, TC* y, int64_t ldy, int M, int N, int K) {
  if (M == 0) return;
  const float alpha = 1.f, beta = 0.f;
  check_cublas(cublasGemmEx(q_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, cuda_type<T>(), K, x,
                            cuda_type<T>(), int(ldx), &beta, y, cuda_type<TC>(), int(ldy), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

template <typename T>
template <typename TY>
bool Layers<T>::int8_gemv(const T* x, const Dense<T>& L, TY* y, int64_t ldy, int rows, const kernels::Activation* act,
                          const kernels::SmallGemmNorm<T>* norm) {
  if constexpr (std::is_same_v<T, __half>) {
    const T* bias = act ? L.b : nullptr;
    if (rows > kernels::int8_gemv_rows() || !kernels::int8_gemv_supported(x, L.in, L.q, bias, rows, L.in, norm))
      return false;
    if constexpr (std::is_same_v<TY, float>)
      kernels::int8_gemv_cuda(x, L.in, L.q, L.scale, y, ldy, rows, L.out, L.in, q_->stream, norm, L.bytes);
    else
      kernels::int8_gemv_cuda(x, L.in, L.q, L.scale, bias, y, ldy, rows, L.out, L.in, act, q_->stream, norm, L.bytes);
    return true;
  } else {
    throw Error(ErrorCode::kInternal, "CUDA engine: int8 weights need float16 activations");
  }
}

template <typename T>
template <typename TC>
bool Layers<T>::int8_gemm_tensor_cores(const T* x, int64_t ldx, const Dense<T>& L, TC* y, int64_t ldy, int rows,
                                       const kernels::Activation* act) {
  constexpr bool kLogits = std::is_same_v<TC, float>;  // float32 out, no bias or activation
  // FP8: cuBLASLt applies the scales (and bias and ReLU) in its epilogue, writing y itself;
  // int8: cuBLAS's int32 products (in the logits buffer itself, or scratch) and a rescale launch.
  const bool e4m3 = L.bytes == kernels::WeightBytes::kE4m3;
  const auto round_up = [](int64_t v) { return (v + 255) / 256 * 256; };
  const int64_t bytes = q_->int8_scratch_elements * int64_t(sizeof(__half));
  const int64_t ldacc = kLogits ? ldy : L.out;
  // IMMA's TN form wants k and the leading dimensions in multiples of 4 (k: 8 for the quantizer).
  if (!q_->int8_scratch || L.in % 8 || ldx % 8 || ldacc % 4 || reinterpret_cast<uintptr_t>(x) % 16) return false;
  const int64_t per_row = L.in + 4 + (kLogits || e4m3 ? 0 : 4 * L.out);
  const int64_t chunk = std::min<int64_t>(rows, (bytes - 3 * 256) / per_row);
  if (chunk < 1) return false;
  char* base = static_cast<char*>(q_->int8_scratch);
  int8_t* xq = reinterpret_cast<int8_t*>(base);
  float* xs = reinterpret_cast<float*>(base + round_up(chunk * L.in));
  int32_t* scratch_acc = reinterpret_cast<int32_t*>(base + round_up(chunk * L.in) + round_up(chunk * 4));
  const T* bias = kLogits || !act ? nullptr : L.b;
  const bool fused_act = act && *act == kernels::Activation::kRelu;  // the FP8 epilogue's; others after it
  const int32_t one = 1, zero = 0;
  for (int64_t m0 = 0; m0 < rows; m0 += chunk) {
    const int mc = int(std::min<int64_t>(chunk, rows - m0));
    kernels::int8_quantize_rows_cuda(x + m0 * ldx, ldx, mc, L.in, xq, xs, q_->stream, L.bytes);
    if (e4m3) {
      if (!kernels::e4m3_gemm_cublaslt(L.q, L.scale, xq, xs, L.out, mc, L.in, fused_act ? bias : nullptr, fused_act,
                                       y + m0 * ldy, ldy, q_->stream)) {
        if (m0 == 0) return false;  // the same shape throughout: cuBLASLt refuses at the first chunk
        throw Error(ErrorCode::kInternal, "CUDA engine: cuBLASLt refused an FP8 GEMM it took before");
      }
      if constexpr (!kLogits) {
        if (act && !fused_act) kernels::bias_activation_cuda(y + m0 * ldy, L.b, mc, L.out, *act, q_->stream);
      }
      continue;
    }
    int32_t* acc = kLogits ? reinterpret_cast<int32_t*>(y + m0 * ldy) : scratch_acc;
    const cublasStatus_t st = cublasGemmEx(q_->cublas, CUBLAS_OP_T, CUBLAS_OP_N, L.out, mc, L.in, &one, L.q, CUDA_R_8I,
                                           L.in, xq, CUDA_R_8I, L.in, &zero, acc, CUDA_R_32I, int(ldacc),
                                           CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && m0 == 0) return false;  // checked before any launch of its own
    check_cublas(st, "cublasGemmEx (int8)");
    kernels::int8_rescale_cuda(acc, ldacc, xs, L.scale, bias, kLogits ? nullptr : act, y + m0 * ldy, ldy, mc, L.out,
                               q_->stream);
  }
  return true;
}

template <typename T>
template <typename TC>
void Layers<T>::int8_gemm(const T* x, int64_t ldx, const Dense<T>& L, TC* y, int64_t ldy, int rows,
                          const kernels::Activation* act) {
  if constexpr (std::is_same_v<T, __half>) {
    if (rows == 0) return;
    if (kernels::int8_gemm_mode() == kernels::Int8GemmMode::kTensorCores &&
        int8_gemm_tensor_cores(x, ldx, L, y, ldy, rows, act))
      return;
    T* w = static_cast<T*>(q_->int8_scratch);
    const int64_t chunk = L.in > 0 ? q_->int8_scratch_elements / L.in : 0;
    if (!w || chunk < 1) throw Error(ErrorCode::kInternal, "CUDA engine: no int8 scratch for the dequantized weights");
    for (int64_t n0 = 0; n0 < L.out; n0 += chunk) {
      const int n = int(std::min<int64_t>(chunk, L.out - n0));
      kernels::int8_dequantize_cuda(L.q + n0 * L.in, L.scale + n0, n, L.in, w, q_->stream, L.bytes);
      gemm(x, ldx, w, y + n0, ldy, rows, n, L.in);
    }
    if constexpr (std::is_same_v<TC, __half>) {
      if (act) kernels::bias_activation_cuda(y, L.b, rows, L.out, *act, q_->stream);
    }
  } else {
    throw Error(ErrorCode::kInternal, "CUDA engine: int8 weights need float16 activations");
  }
}

template <typename T>
bool Layers<T>::linear(const T* x, const Dense<T>& L, T* y, int rows, const kernels::Activation* act) {
  const T* bias = act ? L.b : nullptr;
  if (L.q) {
    if (int8_gemv(x, L, y, L.out, rows, act, nullptr)) return true;
    int8_gemm(x, L.in, L, y, L.out, rows, act);
    return act != nullptr;
  }
  if (kernels::small_gemm_supported<T>(x, L.in, L.w, bias, L.out, rows, L.in)) {
    kernels::small_gemm_cuda<T>(x, L.in, L.w, bias, y, L.out, rows, L.out, L.in, act, q_->stream);
    return true;
  }
  gemm(x, L.in, L.w, y, L.out, rows, L.out, L.in);
  if (act) kernels::bias_activation_cuda(y, bias, rows, L.out, *act, q_->stream);
  return act != nullptr;
}

template <typename T>
kernels::SmallGemmNorm<T> Layers<T>::pending_norm(const Residual<T>& x) const {
  kernels::SmallGemmNorm<T> n;
  n.residual = x.current;
  n.bias = x.bias;
  n.gamma = x.norm->gamma;
  n.beta = x.norm->beta;
  n.eps = eps_;
  n.out = x.next();
  return n;
}

template <typename T>
bool Layers<T>::sublayer_input(Residual<T>& x, const Dense<T>& L, T* y, int rows, const Norm<T>& n, T* scratch,
                               const kernels::Activation* act) {
  return pre_norm_ ? pre_norm_input(x, L, y, rows, n, scratch, act) : post_norm_input(x, L, y, rows, act);
}

template <typename T>
bool Layers<T>::post_norm_input(Residual<T>& x, const Dense<T>& L, T* y, int rows, const kernels::Activation* act) {
  if (!x.sub) return linear(x.current, L, y, rows, act);
  const kernels::SmallGemmNorm<T> n = pending_norm(x);
  const T* bias = act ? L.b : nullptr;
  if (L.q) {
    if (!int8_gemv(x.sub, L, y, L.out, rows, act, &n)) return linear(settle(x, rows), L, y, rows, act);
    x.advance();
    return true;
  }
  if (!kernels::small_gemm_supported<T>(x.sub, L.in, L.w, bias, L.out, rows, L.in, &n))
    return linear(settle(x, rows), L, y, rows, act);
  kernels::small_gemm_cuda<T>(x.sub, L.in, L.w, bias, y, L.out, rows, L.out, L.in, act, q_->stream, &n);
  x.advance();
  return true;
}

// The small GEMM normalizes x (its pending sum added, and stored as the new stream) in its
// prologue; otherwise one LayerNorm launch writes both the sum and LN_n(sum) into scratch.
template <typename T>
bool Layers<T>::pre_norm_input(Residual<T>& x, const Dense<T>& L, T* y, int rows, const Norm<T>& n, T* scratch,
                               const kernels::Activation* act) {
  const bool pending = x.sub != nullptr;
  kernels::SmallGemmNorm<T> p;
  p.residual = pending ? x.current : nullptr;
  p.bias = pending ? x.bias : nullptr;
  p.gamma = n.gamma;
  p.beta = n.beta;
  p.eps = eps_;
  p.out = pending ? x.next() : nullptr;
  p.store_sum = true;
  const T* in = pending ? x.sub : x.current;
  const T* bias = act ? L.b : nullptr;
  if (L.q && int8_gemv(in, L, y, L.out, rows, act, &p)) {
    if (pending) x.advance();
    return true;
  }
  if (!L.q && kernels::small_gemm_supported<T>(in, L.in, L.w, bias, L.out, rows, L.in, &p)) {
    kernels::small_gemm_cuda<T>(in, L.in, L.w, bias, y, L.out, rows, L.out, L.in, act, q_->stream, &p);
    if (pending) x.advance();
    return true;
  }
  kernels::layer_norm_cuda(in, p.residual, p.bias, n.gamma, n.beta, scratch, rows, d_, eps_, q_->stream, nullptr,
                           nullptr, p.out);
  if (pending) x.advance();
  return linear(scratch, L, y, rows, act);
}

template <typename T>
void Layers<T>::feed_forward(Residual<T>& x, const Dense<T>& fc1, const Dense<T>& fc2, const Norm<T>& n, T* hidden,
                             T* tmp, T* scratch, int rows) {
  sublayer_input(x, fc1, hidden, rows, n, scratch, &activation_);
  linear(hidden, fc2, tmp, rows);
  sublayer_output(x, tmp, fc2.b, n);
}

template <typename T>
void Layers<T>::final_norm(Residual<T>& x, const Norm<T>& n, int rows) {
  if (x.sub) {
    x.norm = &n;
    return;
  }
  normalize(x, n, rows);
}

template <typename T>
void Layers<T>::normalize(Residual<T>& x, const Norm<T>& n, int rows) {
  kernels::layer_norm_cuda<T>(x.current, nullptr, nullptr, n.gamma, n.beta, x.next(), rows, d_, eps_, q_->stream);
  x.advance();
}

template <typename T>
const T* Layers<T>::settle(Residual<T>& x, int rows) {
  if (!x.sub) return x.current;
  if (!x.norm)  // a pre-norm sum: every pre-norm stack ends in final_norm(), which sets one
    throw Error(ErrorCode::kInternal, "CUDA engine: a pre-norm residual settled without a LayerNorm");
  kernels::layer_norm_cuda(x.sub, x.current, x.bias, x.norm->gamma, x.norm->beta, x.next(), rows, d_, eps_,
                           q_->stream);
  x.advance();
  return x.current;
}

template <typename T>
void Layers<T>::project_logits(Residual<T>& x, const Dense<T>& proj, float* logits, int ld, int rows) {
  if (x.sub && !x.norm)
    throw Error(ErrorCode::kInternal, "CUDA engine: a pre-norm residual projected without a LayerNorm");
  const kernels::SmallGemmNorm<T> pending = x.sub ? pending_norm(x) : kernels::SmallGemmNorm<T>{};
  const kernels::SmallGemmNorm<T>* norm = x.sub ? &pending : nullptr;
  const T* in = x.sub ? x.sub : x.current;
  if (proj.q) {
    if (int8_gemv(in, proj, logits, ld, rows, nullptr, norm)) {
      if (x.sub) x.advance();
    } else {
      int8_gemm(settle(x, rows), d_, proj, logits, ld, rows, nullptr);
    }
    return;
  }
  const T* w = proj.w;
  if (kernels::small_gemm_logits_supported<T>(in, d_, w, ld, rows, d_, norm)) {
    kernels::small_gemm_logits_cuda<T>(in, d_, w, logits, ld, rows, ld, d_, q_->stream, norm);
    if (x.sub) x.advance();
    return;
  }
  gemm(settle(x, rows), d_, w, logits, ld, rows, ld, d_);
}

template class Layers<float>;
template class Layers<__half>;

}  // namespace nmt::cuda
