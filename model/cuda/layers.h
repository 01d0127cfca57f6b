#pragma once
// The CUDA engine's layer helpers, shared by the encoder and the decoder step: dense
// projections (the small GEMM at few rows, cuBLAS otherwise), and the residual stream of a
// layer stack with its LayerNorms in either order (Architecture::norm_order), each fused into
// the next projection's small-GEMM prologue where it can be.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "kernels/activation.h"
#include "kernels/small_gemm.h"
#include "model/config/model_config.h"
#include "model/cuda/device/graph_cache.h"
#include "model/cuda/device_weights.h"

namespace nmt::cuda {

// cuBLAS's name of T.
template <typename T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type<__half>() { return CUDA_R_16F; }

// The residual stream of a layer stack, [rows, d]. After each sublayer an update is left
// pending: current = LN(current + sub + bias) with `norm` (post-norm), or current + sub + bias
// without (pre-norm, whose sublayers read the stream normalized by their own LayerNorm). The
// next projection's small GEMM does it in its prologue where it can (no launch of its own),
// or layer_norm_cuda otherwise (more rows than the small GEMM takes). It writes the other
// buffer of the pair: the GEMM's other blocks still read the current one.
template <typename T>
struct Residual {
  T* buffers[2];
  T* current = buffers[0];
  const T* sub = nullptr;  // pending when set
  const T* bias = nullptr;
  const Norm<T>* norm = nullptr;  // the pending LayerNorm; null: a pre-norm sum

  void add(const T* sublayer, const T* sublayer_bias, const Norm<T>* n) {
    sub = sublayer;
    bias = sublayer_bias;
    norm = n;
  }
  T* next() const { return current == buffers[0] ? buffers[1] : buffers[0]; }
  void advance() {
    current = next();
    sub = nullptr;
  }
};

template <typename T>
class Layers {
 public:
  // q: where the launches go, read at each call (the engine points it at a stream).
  Layers(const ModelConfig& c, const DeviceQueue* q)
      : d_(c.d_model), eps_(c.layer_norm_eps), activation_(c.activation),
        pre_norm_(c.arch.norm_order == NormOrder::kPre), q_(q) {}

  // y = x W^T, or with `act` y = act(x W^T + b). A few rows (a decode step at small batches)
  // go through kernels::small_gemm_cuda, which reads W once for all of them where cuBLAS's
  // smallest tiles are latency-bound, with the bias and activation in its epilogue; otherwise
  // cuBLAS, then bias_activation's launch. True when its last launch is a kernel of ours,
  // which lets the next one start only after its own wait (a cuBLAS kernel makes no such
  // promise).
  bool linear(const T* x, const Dense<T>& L, T* y, int rows, const kernels::Activation* act = nullptr);

  // The projection L of a sublayer whose LayerNorm is n, on the stream x (see linear(), also
  // for what it returns): post-norm, x's pending LayerNorm done first (n was registered by
  // the sublayer before); pre-norm, L(LN_n(x)) with x's pending sum done first. `scratch`
  // ([rows, d]) takes LN_n(x) where the small GEMM cannot.
  bool sublayer_input(Residual<T>& x, const Dense<T>& L, T* y, int rows, const Norm<T>& n, T* scratch,
                      const kernels::Activation* act = nullptr);
  // The sublayer's output `out` + bias joins x (pending): post-norm with its LayerNorm n.
  void sublayer_output(Residual<T>& x, const T* out, const T* bias, const Norm<T>& n) const {
    x.add(out, bias, pre_norm_ ? nullptr : &n);
  }
  // x + fc2(act(fc1 x + b1)) + b2 with the LayerNorm n where the order puts it, left
  // pending; hidden: [rows, ffn] scratch, tmp and scratch: [rows, d] (fc2's output, LN_n(x)).
  void feed_forward(Residual<T>& x, const Dense<T>& fc1, const Dense<T>& fc2, const Norm<T>& n, T* hidden,
                    T* tmp, T* scratch, int rows);

  // A pre-norm stack's final LayerNorm n after its last layer: the pending sum becomes a
  // pending LN_n(sum) (done by settle() or project_logits()).
  void final_norm(Residual<T>& x, const Norm<T>& n, int rows);
  // x = LN_n(x) now (mBART's layernorm_embedding), nothing pending before.
  void normalize(Residual<T>& x, const Norm<T>& n, int rows);
  // x's pending update done on its own; returns the stream's value.
  const T* settle(Residual<T>& x, int rows);

  // The step's float32 logits = LN(x) W^T, [rows, ld]: at a few rows one
  // small_gemm_logits_cuda launch with the pending LayerNorm in its prologue (cuBLAS follows
  // a LayerNorm launch of its own and lets nothing after it start early); otherwise the
  // LayerNorm, then cuBLAS. W: [ld, d] (zero rows past the vocabulary).
  // With int8 weights (W's q and scale) the int8 GEMV (kernels/quantize.h) replaces the small
  // GEMMs at up to int8_gemv_rows() rows, its LayerNorm prologue the same; more rows dequantize
  // W to float16 in the queue's scratch, a chunk of its rows at a time, for cuBLAS.
  void project_logits(Residual<T>& x, const Dense<T>& w, float* logits, int ld, int rows);

 private:
  // y[M, N] = x[M, K] W[N, K]^T, row-major.
  template <typename TC>
  void gemm(const T* x, int64_t ldx, const T* w, TC* y, int64_t ldy, int M, int N, int K);
  // int8 weights: y = x W^T (+ act(.. + b)) through the int8 GEMV, with `norm` in its prologue;
  // false, with nothing launched, where it does not take the shape.
  template <typename TY>
  bool int8_gemv(const T* x, const Dense<T>& L, TY* y, int64_t ldy, int rows, const kernels::Activation* act,
                 const kernels::SmallGemmNorm<T>* norm);
  // int8 weights at any rows, y = x W^T (act(.. + b) where act is given), as
  // kernels::int8_gemm_mode() says: the rows quantized per row and cuBLAS's int8 GEMM, a chunk
  // of rows that fits the queue's scratch at a time (the float32 logits hold their own int32
  // products), or W dequantized chunk by chunk and cuBLAS's float16 GEMM.
  template <typename TC>
  void int8_gemm(const T* x, int64_t ldx, const Dense<T>& L, TC* y, int64_t ldy, int rows,
                 const kernels::Activation* act);
  // The tensor-core form; false, with nothing launched, where the scratch or cuBLAS does not
  // take the shape.
  template <typename TC>
  bool int8_gemm_tensor_cores(const T* x, int64_t ldx, const Dense<T>& L, TC* y, int64_t ldy, int rows,
                              const kernels::Activation* act);
  // x's pending post-norm LayerNorm as the small GEMM's prologue takes it (x.sub, x.norm set).
  kernels::SmallGemmNorm<T> pending_norm(const Residual<T>& x) const;
  bool post_norm_input(Residual<T>& x, const Dense<T>& L, T* y, int rows, const kernels::Activation* act);
  bool pre_norm_input(Residual<T>& x, const Dense<T>& L, T* y, int rows, const Norm<T>& n, T* scratch,
                      const kernels::Activation* act);

  const int d_;
  const float eps_;
  const kernels::Activation activation_;
  const bool pre_norm_;
  const DeviceQueue* q_;
};

}  // namespace nmt::cuda
