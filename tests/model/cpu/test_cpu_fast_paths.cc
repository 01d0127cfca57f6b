// The CPU engine's fast paths (model/cpu) against the reference kernels they replace in the
// decode step (kernels/cpu): the same results within float32 rounding, and the same beam
// candidates, ties and masks included. The golden and conformance suites check that whole
// translations stay transformers-exact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cpu/layer_norm_fast.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/layer_norm.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"
#include "model/cpu/candidates.h"
#include "model/cpu/dense.h"

using namespace nmt;

namespace {

std::vector<float> random_logits(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 4.f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

}  // namespace

TEST(CpuFastPaths, LogSumExpMatchesSoftmaxReference) {
  for (int64_t n : {1, 7, 8, 9, 64, 8001}) {
    std::vector<float> x = random_logits(size_t(n), unsigned(n)), lp(static_cast<size_t>(n));
    kernels::SoftmaxOptions opt;
    opt.log = true;
    kernels::softmax_cpu(x.data(), lp.data(), 1, n, opt);
    const float lse = cpu::log_sum_exp(x.data(), n);
    for (int64_t t = 0; t < n; ++t) {
      // lp = x - lse_ref: the two log-sum-exps agree to float rounding of the value.
      EXPECT_NEAR(x[size_t(t)] - lse, lp[size_t(t)], 4e-7 * std::fabs(lse) + 1e-6) << "n " << n << " t " << t;
    }
  }
  const float big = 80.f;  // exp(80) overflows float, not the max-shifted double sum
  std::vector<float> x = {big, big, -big};
  EXPECT_NEAR(cpu::log_sum_exp(x.data(), 3), big + std::log(2.f), 1e-5);
}

// Sentences of `beam` rows through row_topk + merge_topk and through kernels::beam_topk_cpu.
void expect_candidates_match(int sentences, int beam, int vocab, int k, bool mask_eos, bool force_eos,
                             bool plant_ties, unsigned seed) {
  const int64_t rows = int64_t(sentences) * beam;
  std::vector<float> logits = random_logits(size_t(rows * vocab), seed);
  if (plant_ties) {
    // Equal logits in one row and across the beams of a sentence: equal scores, ordered by index.
    for (int64_t r = 0; r < rows; ++r)
      for (int t = 0; t < 6; ++t) logits[size_t(r * vocab + 3 + 5 * t)] = 20.f;
  }
  std::vector<float> running(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) running[size_t(r)] = plant_ties ? 0.f : -0.5f * float(r % beam);
  if (beam > 2) running[1] = -std::numeric_limits<float>::infinity();  // a finished beam
  kernels::TopkMasks masks;
  masks.pad_id = vocab - 1;
  masks.eos_id = 0;
  masks.mask_eos = mask_eos;
  masks.force_eos = force_eos;
  std::vector<float> ref_scores(size_t(sentences * k));
  std::vector<int> ref_index(size_t(sentences * k));
  kernels::beam_topk_cpu(logits.data(), nullptr, running.data(), sentences, beam, vocab, k, masks,
                         ref_scores.data(), ref_index.data());

  const int per_row = std::min(k, vocab);
  std::vector<float> row_scores(size_t(rows * per_row)), scores(size_t(sentences * k));
  std::vector<int> row_tokens(size_t(rows * per_row)), index(size_t(sentences * k));
  const cpu::RowMasks row_masks{masks.pad_id, masks.eos_id, mask_eos, force_eos};
  for (int64_t r = 0; r < rows; ++r)
    cpu::row_topk(logits.data() + r * vocab, vocab, running[size_t(r)], row_masks, per_row,
                  row_scores.data() + r * per_row, row_tokens.data() + r * per_row);
  for (int s = 0; s < sentences; ++s)
    cpu::merge_topk(row_scores.data() + int64_t(s) * beam * per_row, row_tokens.data() + int64_t(s) * beam * per_row,
                    beam, per_row, per_row, vocab, k, scores.data() + s * k, index.data() + s * k);
  for (size_t i = 0; i < scores.size(); ++i) {
    EXPECT_EQ(index[i], ref_index[i]) << "candidate " << i;
    if (std::isinf(ref_scores[i])) {
      EXPECT_EQ(scores[i], ref_scores[i]) << "candidate " << i;
    } else {
      EXPECT_NEAR(scores[i], ref_scores[i], 1e-6 * std::fabs(ref_scores[i]) + 1e-6) << "candidate " << i;
    }
  }
}

TEST(CpuFastPaths, CandidatesMatchBeamTopkReference) {
  expect_candidates_match(5, 4, 8001, 8, false, false, false, 1);
  expect_candidates_match(3, 4, 8001, 8, true, false, false, 2);
  expect_candidates_match(2, 4, 8001, 8, false, true, false, 3);   // -inf candidates by index
  expect_candidates_match(3, 4, 1000, 8, false, false, true, 4);   // exact ties
  expect_candidates_match(4, 1, 513, 1, false, false, false, 5);   // greedy
  expect_candidates_match(2, 3, 5, 12, false, false, false, 6);    // k > vocab: every row whole
  expect_candidates_match(2, 5, 300, 32, true, false, true, 7);
}

TEST(CpuFastPaths, LayerNormMatchesReference) {
  for (int64_t cols : {1, 5, 256, 1027}) {
    const int64_t rows = 9;
    std::vector<float> x = random_logits(size_t(rows * cols), unsigned(cols) + 10);
    std::vector<float> residual = random_logits(size_t(rows * cols), unsigned(cols) + 11);
    std::vector<float> gamma = random_logits(size_t(cols), 12), beta = random_logits(size_t(cols), 13);
    for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] = 1e4f;  // a constant row: variance 0, eps decides
    for (int64_t c = 0; c < cols; ++c) residual[size_t(cols + c)] = 0.f;
    std::vector<float> ref(x.size()), y = residual;
    kernels::layer_norm_cpu(x.data(), residual.data(), nullptr, gamma.data(), beta.data(), ref.data(), rows, cols,
                            1e-5f);
    cpu::add_layer_norm(x.data(), y.data(), gamma.data(), beta.data(), rows, cols, 1e-5f);
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_NEAR(y[i], ref[i], 1e-5f * (std::fabs(ref[i]) + 1.f)) << "cols " << cols << " at " << i;
  }
}

TEST(CpuFastPaths, AttendRowMatchesAttentionReference) {
  const int heads = 4, head_dim = 64;
  const int64_t d = heads * head_dim, stride = 3 * d;  // keys/values interleaved with other rows' data
  std::vector<double> scratch;
  for (int64_t keys : {1, 2, 17, 70}) {
    std::vector<float> q = random_logits(size_t(d), unsigned(keys) + 20);
    std::vector<float> kv = random_logits(size_t(keys * stride), unsigned(keys) + 21);
    for (float& v : q) v *= 0.25f;
    kernels::AttentionArgs<float> a;
    a.q = q.data();
    a.k = kv.data();
    a.v = kv.data() + d;
    std::vector<float> ref(static_cast<size_t>(d)), out(static_cast<size_t>(d), -1.f);
    a.out = ref.data();
    a.batch = 1;
    a.heads = heads;
    a.head_dim = head_dim;
    a.q_len = 1;
    a.kv_len = keys;
    a.q_batch_stride = a.q_row_stride = d;
    a.kv_batch_stride = keys * stride;
    a.kv_row_stride = stride;
    a.out_batch_stride = a.out_row_stride = d;
    a.scale = 1.f / std::sqrt(float(head_dim));
    kernels::attention_cpu(a);
    std::vector<const float*> rows(static_cast<size_t>(keys));
    for (int64_t j = 0; j < keys; ++j) rows[size_t(j)] = kv.data() + j * stride;
    cpu::attend_row(q.data(), rows.data(), 0, d, out.data(), keys, heads, head_dim, &scratch);
    for (int64_t c = 0; c < d; ++c)
      EXPECT_NEAR(out[size_t(c)], ref[size_t(c)], 1e-5f) << "keys " << keys << " at " << c;
    // The same keys spread over three cache rows' blocks at an offset (the beam reorder's
    // tables, a layer's part of a block): the same result, bit for bit.
    const int64_t row_stride = keys * stride, offset = 5;
    std::vector<float> cache(static_cast<size_t>(3 * row_stride + offset), std::nanf(""));
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t row = (j * 7 + 1) % 3;
      rows[size_t(j)] = cache.data() + row * row_stride + j * stride;
      std::copy_n(kv.data() + j * stride, stride, cache.data() + row * row_stride + j * stride + offset);
    }
    std::vector<float> gathered(static_cast<size_t>(d));
    cpu::attend_row(q.data(), rows.data(), offset, d, gathered.data(), keys, heads, head_dim, &scratch);
    EXPECT_EQ(gathered, out) << "keys " << keys;
  }
}

TEST(CpuFastPaths, SwishMatchesActivationReference) {
  std::vector<float> x = random_logits(1027, 30);
  x[0] = 0.f;
  x[1] = -100.f;  // exp(100) overflows: swish -> -0
  x[2] = 100.f;
  std::vector<float> ref = x;
  kernels::bias_activation_cpu(ref.data(), nullptr, 1, int64_t(ref.size()), kernels::Activation::kSwish);
  cpu::swish(x.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], ref[i], 1e-6f * std::fabs(ref[i]) + 1e-30f) << "at " << i;
}

// Linear layers through oneDNN's matmul with weights packed at load (cpu/packed_matrix.h)
// against the plain GEMM they replace and a double-precision product: the decode step's row
// counts (one beam to a batch's 128 and the encoder's more), with and without a bias.
TEST(CpuFastPaths, PackedLinearMatchesPlainGemm) {
  const int64_t n = 301, k = 96;
  std::vector<float> w = random_logits(size_t(n * k), 40), bias = random_logits(size_t(n), 41);
  for (float& v : w) v *= 0.05f;
  cpu::Linear plain{w.data(), bias.data(), k, n};
  cpu::Linear packed = plain;
  packed.pack();
  ASSERT_TRUE(packed.packed) << "oneDNN offers no packed matmul on this CPU";
  for (int64_t m : {1, 4, 37, 128, 129, 1000, 4}) {  // 4 again: a row count seen before
    std::vector<float> x = random_logits(size_t(m * k), unsigned(m) + 42);
    for (bool with_bias : {true, false}) {
      plain.b = packed.b = with_bias ? bias.data() : nullptr;
      std::vector<float> want(size_t(m * n)), got(size_t(m * n), std::nanf(""));
      plain(x.data(), m, want.data());
      packed(x.data(), m, got.data());
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          double ref = with_bias ? bias[size_t(j)] : 0.0, mag = std::fabs(ref);
          for (int64_t c = 0; c < k; ++c) {
            ref += double(x[size_t(r * k + c)]) * w[size_t(j * k + c)];
            mag += std::fabs(double(x[size_t(r * k + c)]) * w[size_t(j * k + c)]);
          }
          const size_t i = size_t(r * n + j);
          EXPECT_NEAR(got[i], ref, 1e-6 * mag + 1e-6) << "m " << m << " row " << r << " col " << j;
          EXPECT_NEAR(got[i], want[i], 2e-6 * mag + 1e-6) << "m " << m << " row " << r << " col " << j;
        }
      }
    }
  }
}
