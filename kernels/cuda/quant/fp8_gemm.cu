// cuBLASLt's FP8 GEMM for e4m3 weights at many rows (kernels/quantize.h, e4m3_gemm_cublaslt):
// e4m3 x e4m3 with float32 accumulation and a float32 output, the per-row and per-channel
// scales applied after it by int8_rescale_cuda (cuBLASLt's own scales are per tensor).
#include <cublasLt.h>

#include <stdexcept>
#include <string>

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
};

}  // namespace

bool e4m3_gemm_cublaslt(const int8_t* w, const int8_t* x, int n, int m, int k, float* d, int64_t ldd,
                        cudaStream_t stream) {
  if (k % 16 || ldd % 4 || reinterpret_cast<uintptr_t>(w) % 16 || reinterpret_cast<uintptr_t>(x) % 16 ||
      reinterpret_cast<uintptr_t>(d) % 16)
    return false;
  if (n <= 0 || m <= 0) return true;
  // Column-major as cuBLASLt sees it: D [n, m] = op(A) B with A the weights [k, n] transposed
  // (FP8 wants the TN form), B the activations [k, m].
  Descs s;
  check(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t t = CUBLAS_OP_T;
  check(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)), "TRANSA");
  check(cublasLtMatrixLayoutCreate(&s.a, CUDA_R_8F_E4M3, k, n, k), "layout A");
  check(cublasLtMatrixLayoutCreate(&s.b, CUDA_R_8F_E4M3, k, m, k), "layout B");
  check(cublasLtMatrixLayoutCreate(&s.d, CUDA_R_32F, n, m, ldd), "layout D");
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
  check(cublasLtMatmul(handle(), s.op, &one, w, s.a, x, s.b, &zero, d, s.d, d, s.d, &result.algo, nullptr, 0, stream),
        "cublasLtMatmul");
  return true;
}

}  // namespace nmt::kernels
