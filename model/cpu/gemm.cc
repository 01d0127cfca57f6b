#include "model/cpu/gemm.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "model/error.h"

namespace nmt::cpu {

void set_threads(int threads) {
#if defined(__SANITIZE_THREAD__)
  // libgomp is not built with ThreadSanitizer: it cannot see the barrier that ends a parallel
  // loop and would report every buffer the loop's threads wrote. One thread runs no team.
  threads = 1;
#endif
  omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
}

void sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t s = dnnl_sgemm('N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (s != dnnl_success) throw Error(ErrorCode::kInternal, "oneDNN sgemm failed (status " + std::to_string(int(s)) + ")");
}

QuantizedMatrix QuantizedMatrix::quantize(const float* w, int64_t rows, int64_t cols) {
  QuantizedMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.q.resize(size_t(rows * cols));
  m.scale.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    m.scale[size_t(r)] = scale;
    for (int64_t c = 0; c < cols; ++c)
      m.q[size_t(r * cols + c)] = int8_t(std::lrintf(std::clamp(row[c] / scale, -127.f, 127.f)));
  }
  return m;
}

void int8_linear(const float* x, int64_t m, const QuantizedMatrix& w, const float* bias, float* y) {
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xscale;
  thread_local std::vector<int32_t> acc;
  const int64_t k = w.cols, n = w.rows;
  xq.resize(std::max(xq.size(), size_t(m * k)));
  xscale.resize(std::max(xscale.size(), size_t(m)));
  acc.resize(std::max(acc.size(), size_t(m * n)));
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * k;
    float amax = 0.f;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    const float inv = 1.f / scale;
    xscale[size_t(r)] = scale;
    int8_t* out = xq.data() + r * k;
    for (int64_t c = 0; c < k; ++c) out[c] = int8_t(std::lrintf(std::clamp(row[c] * inv, -127.f, 127.f)));
  }
  const int32_t co = 0;
  const dnnl_status_t s = dnnl_gemm_s8s8s32('N', 'T', 'F', m, n, k, 1.f, xq.data(), k, 0, w.q.data(), k, 0,
                                            0.f, acc.data(), n, &co);
  if (s != dnnl_success) throw Error(ErrorCode::kInternal, "oneDNN int8 gemm failed (status " + std::to_string(int(s)) + ")");
  for (int64_t r = 0; r < m; ++r) {
    const float xs = xscale[size_t(r)];
    const int32_t* a = acc.data() + r * n;
    float* yr = y + r * n;
    for (int64_t c = 0; c < n; ++c) yr[c] = float(a[c]) * (xs * w.scale[size_t(c)]) + bias[c];
  }
}

}  // namespace nmt::cpu
