#include "model/cpu/gemm.h"

#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/quantize.h"
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

namespace {

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// out[c] = lrintf(clamp(row[c] * inv, -127, 127)), 32 at a time: the conversion rounds to
// nearest even as lrintf does in the default rounding mode, so both paths give equal bytes.
__attribute__((target("avx2,fma"))) inline __m256i quantize8(const float* x, __m256 scale) {
  const __m256 lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x), scale), lo), hi));
}

__attribute__((target("avx2,fma"))) void quantize_row_avx2(const float* row, int64_t k, float inv, int8_t* out) {
  const __m256 scale = _mm256_set1_ps(inv);
  auto q = [&](int64_t c) __attribute__((target("avx2,fma"))) { return quantize8(row + c, scale); };
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
  int64_t c = 0;
  for (; c + 32 <= k; c += 32) {
    const __m256i words =
        _mm256_packs_epi16(_mm256_packs_epi32(q(c), q(c + 8)), _mm256_packs_epi32(q(c + 16), q(c + 24)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), _mm256_permutevar8x32_epi32(words, order));
  }
  for (; c < k; ++c) out[c] = int8_t(std::lrintf(std::clamp(row[c] * inv, -127.f, 127.f)));
}

void quantize_row(const float* row, int64_t k, float inv, int8_t* out) {
  if (has_avx2()) return quantize_row_avx2(row, k, inv, out);
  for (int64_t c = 0; c < k; ++c) out[c] = int8_t(std::lrintf(std::clamp(row[c] * inv, -127.f, 127.f)));
}

// Elements (rows x (k + n)) from which int8_linear's per-row work is split across threads:
// below it a parallel region's wake-up costs more than the work.
constexpr int64_t kParallelElements = 1 << 16;

float abs_max(const float* row, int64_t k) {
  float amax = 0.f;
#pragma omp simd reduction(max : amax)
  for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
  return amax;
}

}  // namespace

int int8_weight_levels() {
  static const int levels = [] {
    const int isa = int(dnnl_get_effective_cpu_isa());
    const auto has = [isa](dnnl_cpu_isa_t flags) { return (isa & int(flags)) == int(flags); };
    return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni) ? 127 : 63;
  }();
  return levels;
}

QuantizedMatrix QuantizedMatrix::quantize(const float* w, int64_t rows, int64_t cols) {
  QuantizedMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.q.resize(size_t(rows * cols));
  m.scale.resize(size_t(rows));
  // The scheme the CUDA engine's int8 shares (kernels/quantize.h), at this CPU's levels.
  kernels::quantize_rows_int8(w, rows, cols, int8_weight_levels(), m.q.data(), m.scale.data());
  m.packed = PackedMatrix::pack(m.q.data(), rows, cols);
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
  // The quantization before the GEMM and the scaling after it are per row: split across the
  // engine's threads where there are enough rows (a decode step of 64 sentences at beam 4
  // has 256), or one thread does them while the other waits (measured: the CPU server's int8
  // steps took 16.9 ms against float32's 14.3 at 64 clients). Rows are independent, so the
  // result is the same on any number of threads.
  // The buffers are this thread's: the loops' other threads reach them through pointers (in
  // the parallel regions, the names would be each thread's own thread_local vectors).
  int8_t* const xq_rows = xq.data();
  float* const x_scales = xscale.data();
  const int32_t* const acc_rows = acc.data();
  const bool split = m * (k + n) >= kParallelElements;
#pragma omp parallel for schedule(static) if (split)
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * k;
    const float amax = abs_max(row, k);
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    x_scales[r] = scale;
    quantize_row(row, k, 1.f / scale, xq_rows + r * k);
  }
  if (!w.packed || !w.packed->product(xq.data(), m, acc.data())) {
    const int32_t co = 0;
    const dnnl_status_t s = dnnl_gemm_s8s8s32('N', 'T', 'F', m, n, k, 1.f, xq.data(), k, 0, w.q.data(), k, 0,
                                              0.f, acc.data(), n, &co);
    if (s != dnnl_success) throw Error(ErrorCode::kInternal, "oneDNN int8 gemm failed (status " + std::to_string(int(s)) + ")");
  }
#pragma omp parallel for schedule(static) if (split)
  for (int64_t r = 0; r < m; ++r) {
    const float xs = x_scales[r];
    const int32_t* a = acc_rows + r * n;
    float* yr = y + r * n;
    const float* ws = w.scale.data();
    if (bias) {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) yr[c] = float(a[c]) * (xs * ws[c]) + bias[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) yr[c] = float(a[c]) * (xs * ws[c]);
    }
  }
}

}  // namespace nmt::cpu
