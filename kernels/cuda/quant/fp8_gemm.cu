// cuBLASLt's FP8 GEMM for e4m3 weights at many rows (kernels/quantize.h, e4m3_gemm_cublaslt):
// e4m3 x e4m3 with float32 accumulation and outer-vector scaling (CUDA 12.9+): the weights'
// per-channel and the activations' per-row scales, the bias and a ReLU applied in the GEMM's
// epilogue, so the output is written once, in its own type. Before, the products went out in
// float32 and a rescale launch read them back: at 1,024 rows the logits alone were 1 GB written
// twice (bench/history/engine-cuda.md, run 61).
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/quantize.h"

namespace nmt::kernels {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("e4m3_gemm_cublaslt: ") + what + " failed: " +
                                                           cublasGetStatusString(s));
}

cublasLtHandle_t handle() {  // one a process: cublasLtMatmul takes the stream, the handle holds no state of a call
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t v = nullptr;
    check(cublasLtCreate(&v), "cublasLtCreate");
    return v;
  }();
  return h;
}

// The descriptors of one call, destroyed with it.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t attr, const V& v, const char* what) {
    check(cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)), what);
  }
};

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

template <typename TY>
bool e4m3_gemm_cublaslt(const int8_t* w, const float* wscale, const int8_t* x, const float* xscale, int n, int m,
                        int k, const __half* bias, bool relu, TY* y, int64_t ldy, cudaStream_t stream) {
  static_assert(std::is_same_v<TY, __half> || std::is_same_v<TY, float>, "float16 or float32 output");
  if (k % 16 || (ldy * int64_t(sizeof(TY))) % 16 || !aligned(w) || !aligned(x) || !aligned(y) ||
      (bias && !aligned(bias)) || (relu && !bias))
    return false;
  if (n <= 0 || m <= 0) return true;
  // Column-major as cuBLASLt sees it: D [n, m] = op(A) B with A the weights [k, n] transposed
  // (FP8 wants the TN form), B the activations [k, m]; the outer vectors are then A's n
  // channel scales and B's m row scales.
  Descs s;
  constexpr cudaDataType_t kOut = std::is_same_v<TY, __half> ? CUDA_R_16F : CUDA_R_32F;
  check(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  s.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "TRANSA");
  const cublasLtMatmulMatrixScale_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  s.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer, "A_SCALE_MODE");
  s.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer, "B_SCALE_MODE");
  s.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, wscale, "A_SCALE_POINTER");
  s.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, xscale, "B_SCALE_POINTER");
  if (bias) {
    const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE");
    s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS_POINTER");
    s.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16F, "BIAS_DATA_TYPE");
  }
  check(cublasLtMatrixLayoutCreate(&s.a, CUDA_R_8F_E4M3, k, n, k), "layout A");
  check(cublasLtMatrixLayoutCreate(&s.b, CUDA_R_8F_E4M3, k, m, k), "layout B");
  check(cublasLtMatrixLayoutCreate(&s.d, kOut, n, m, ldy), "layout D");
  check(cublasLtMatmulPreferenceCreate(&s.pref), "cublasLtMatmulPreferenceCreate");
  const size_t workspace = 0;
  check(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                             sizeof(workspace)),
        "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(handle(), s.op, s.a, s.b, s.d, s.d, s.pref, 1, &result, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found == 0)
    return false;
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t st =
      cublasLtMatmul(handle(), s.op, &one, w, s.a, x, s.b, &zero, y, s.d, y, s.d, &result.algo, nullptr, 0, stream);
  // A scale mode this cuBLASLt does not take shows only here, before anything is launched.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) return false;
  check(st, "cublasLtMatmul");
  return true;
}

template bool e4m3_gemm_cublaslt<__half>(const int8_t*, const float*, const int8_t*, const float*, int, int, int,
                                         const __half*, bool, __half*, int64_t, cudaStream_t);
template bool e4m3_gemm_cublaslt<float>(const int8_t*, const float*, const int8_t*, const float*, int, int, int,
                                        const __half*, bool, float*, int64_t, cudaStream_t);

}  // namespace nmt::kernels
