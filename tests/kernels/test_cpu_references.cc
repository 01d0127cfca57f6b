// The CPU references against values computed by hand: they are what the CUDA kernels are
// checked against, so they are checked first.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/layer_norm.h"
#include "kernels/softmax.h"
#include "kernels/topk.h"

namespace nmt::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CpuReference, LayerNormPlain) {
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> y(4), mean(1), inv_std(1);
  layer_norm_cpu(x.data(), nullptr, nullptr, nullptr, nullptr, y.data(), 1, 4, 0.f, mean.data(),
                 inv_std.data());
  // mean 2.5, variance 1.25
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_FLOAT_EQ(inv_std[0], 1.f / std::sqrt(1.25f));
  const float expect[] = {-1.3416408f, -0.4472136f, 0.4472136f, 1.3416408f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], expect[i], 1e-6f);
}

TEST(CpuReference, LayerNormResidualBiasAffine) {
  // z = x + residual + bias = {2, 2, 2, 6}: mean 3, variance 3
  const std::vector<float> x = {1, 1, 1, 1}, res = {1, 1, 1, 1}, bias = {0, 0, 0, 4};
  const std::vector<float> gamma = {2, 2, 2, 2}, beta = {1, 1, 1, 1};
  std::vector<float> y(4);
  layer_norm_cpu(x.data(), res.data(), bias.data(), gamma.data(), beta.data(), y.data(), 1, 4,
                 0.f);
  const float n = 1.f / std::sqrt(3.f);  // (2 - 3) / sqrt(3) = -n, (6 - 3) / sqrt(3) = 3n
  EXPECT_NEAR(y[0], -2 * n + 1, 1e-6f);
  EXPECT_NEAR(y[3], 6 * n + 1, 1e-6f);
}

TEST(CpuReference, Softmax) {
  const std::vector<float> x = {1, 2, 3};
  std::vector<float> y(3);
  SoftmaxOptions opt;
  softmax_cpu(x.data(), y.data(), 1, 3, opt);
  EXPECT_NEAR(y[0], 0.09003057f, 1e-7f);
  EXPECT_NEAR(y[1], 0.24472847f, 1e-7f);
  EXPECT_NEAR(y[2], 0.66524096f, 1e-7f);
  opt.log = true;
  softmax_cpu(x.data(), y.data(), 1, 3, opt);
  EXPECT_NEAR(y[0], -2.40760596f, 1e-6f);
  EXPECT_NEAR(y[2], -0.40760596f, 1e-6f);
}

TEST(CpuReference, SoftmaxScaleAndMasks) {
  // two rows sharing one key length of 2; scale 2 turns {0.5, 1, 9} into {1, 2, (masked)}
  const std::vector<float> x = {0.5f, 1, 9, 0.5f, 1, 9};
  const int len[] = {2};
  std::vector<float> y(6);
  SoftmaxOptions opt;
  opt.scale = 2.f;
  opt.key_lengths = len;
  opt.rows_per_length = 2;
  softmax_cpu(x.data(), y.data(), 2, 3, opt);
  EXPECT_NEAR(y[0], 0.26894142f, 1e-7f);
  EXPECT_NEAR(y[1], 0.73105858f, 1e-7f);
  EXPECT_EQ(y[2], 0.f);
  // causal: row i sees columns <= i (offset 0), so row 0 sees only column 0
  SoftmaxOptions causal;
  causal.causal_rows = 2;
  softmax_cpu(x.data(), y.data(), 2, 3, causal);
  EXPECT_FLOAT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], 0.f);
  EXPECT_NEAR(y[3], 0.37754067f, 1e-7f);  // softmax(0.5, 1)
  EXPECT_EQ(y[5], 0.f);
  causal.log = true;
  softmax_cpu(x.data(), y.data(), 2, 3, causal);
  EXPECT_EQ(y[1], -kInf);
}

TEST(CpuReference, BiasActivation) {
  std::vector<float> x = {1, -1, 0.5f, 1, -1, 0.5f, 0, 0, 0};
  const std::vector<float> bias = {0, 0, 0.5f};
  bias_activation_cpu(x.data(), bias.data(), 1, 3, Activation::kRelu);
  EXPECT_EQ(x[0], 1.f);
  EXPECT_EQ(x[1], 0.f);
  EXPECT_EQ(x[2], 1.f);
  bias_activation_cpu(x.data() + 3, bias.data(), 1, 3, Activation::kGelu);
  EXPECT_NEAR(x[3], 0.84134475f, 1e-6f);
  EXPECT_NEAR(x[4], -0.15865525f, 1e-6f);
  bias_activation_cpu(x.data() + 6, nullptr, 1, 3, Activation::kSwish);
  EXPECT_EQ(x[6], 0.f);
  std::vector<float> one = {1};
  bias_activation_cpu(one.data(), nullptr, 1, 1, Activation::kSwish);
  EXPECT_NEAR(one[0], 0.73105858f, 1e-6f);
}

AttentionArgs<float> packed_args(const float* q, const float* k, const float* v, float* out,
                                 int64_t batch, int heads, int d, int64_t m, int64_t n) {
  AttentionArgs<float> a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.batch = batch;
  a.heads = heads;
  a.head_dim = d;
  a.q_len = m;
  a.kv_len = n;
  a.q_row_stride = a.kv_row_stride = a.out_row_stride = int64_t(heads) * d;
  a.q_batch_stride = a.out_batch_stride = m * heads * d;
  a.kv_batch_stride = n * heads * d;
  return a;
}

TEST(CpuReference, Attention) {
  // q = (1, 0); keys (1, 0), (0, 1): scores (1, 0), weights (e, 1) / (e + 1)
  const std::vector<float> q = {1, 0, 1, 0}, k = {1, 0, 0, 1}, v = {1, 2, 3, 4};
  std::vector<float> out(4, -7.f);
  auto a = packed_args(q.data(), k.data(), v.data(), out.data(), 1, 1, 2, 1, 2);
  attention_cpu(a);
  const float w0 = 0.73105858f, w1 = 0.26894142f;
  EXPECT_NEAR(out[0], w0 * 1 + w1 * 3, 1e-6f);
  EXPECT_NEAR(out[1], w0 * 2 + w1 * 4, 1e-6f);
  // two queries, causal: query 0 sees key 0 only, query 1 both
  a.q_len = 2;
  a.q_batch_stride = a.out_batch_stride = 4;
  a.causal = true;
  attention_cpu(a);
  EXPECT_FLOAT_EQ(out[0], 1.f);
  EXPECT_FLOAT_EQ(out[1], 2.f);
  EXPECT_NEAR(out[2], w0 * 1 + w1 * 3, 1e-6f);
  // key length 0: no visible key, zero output
  const int zero[] = {0};
  a.key_lengths = zero;
  attention_cpu(a);
  EXPECT_EQ(out[3], 0.f);
  // scores with a scale of 2 and the causal mask
  a.key_lengths = nullptr;
  a.scale = 2.f;
  std::vector<float> s(4);
  attention_scores_cpu(a, s.data());
  EXPECT_EQ(s[0], 2.f);
  EXPECT_EQ(s[1], -kInf);
  EXPECT_EQ(s[2], 2.f);
  EXPECT_EQ(s[3], 0.f);
}

TEST(CpuReference, Elementwise) {
  const std::vector<float> emb = {1, 2, 3, 4, 5, 6}, pos = {10, 20, 30, 40};
  const int ids[] = {2, 0}, positions[] = {1, 0};
  std::vector<float> out(4);
  embed_positions_cpu(ids, emb.data(), pos.data(), positions, out.data(), 2, 2, 2.f);
  EXPECT_EQ(out, (std::vector<float>{40, 52, 12, 24}));
  add_bias_cpu(out.data(), std::vector<float>{1, -1}.data(), 2, 2);
  EXPECT_EQ(out, (std::vector<float>{41, 51, 13, 23}));
  // gather the used prefix (2 of 3 elements) of rows {1, 1, 0}
  const std::vector<float> src = {1, 2, 3, 4, 5, 6};
  std::vector<float> dst(9, 0.f);
  const int index[] = {1, 1, 0};
  gather_rows_cpu(src.data(), dst.data(), index, 3, 3, 3, 2);
  EXPECT_EQ(dst, (std::vector<float>{4, 5, 0, 4, 5, 0, 1, 2, 0}));
  // append step 1 of 2 rows into caches of max_len 3, d_model 2; new rows have stride 4
  const std::vector<float> kn = {1, 2, 0, 0, 3, 4, 0, 0}, vn = {5, 6, 0, 0, 7, 8, 0, 0};
  std::vector<float> kc(12, 0.f), vc(12, 0.f);
  kv_append_cpu(kn.data(), vn.data(), 4, kc.data(), vc.data(), 2, 1, 3, 2);
  EXPECT_EQ(kc, (std::vector<float>{0, 0, 1, 2, 0, 0, 0, 0, 3, 4, 0, 0}));
  EXPECT_EQ(vc[2], 5.f);
  EXPECT_EQ(vc[9], 8.f);
}

TEST(CpuReference, BeamTopk) {
  // row 0: uniform over 3 tokens; row 1: probabilities 1/8, 2/8, 5/8
  const std::vector<float> logits = {0, 0, 0, 0, std::log(2.f), std::log(5.f)};
  const std::vector<float> running = {0, -1};
  const float third = -1.0986123f, l28 = -1.3862944f, l58 = -0.4700036f;
  std::vector<float> s(4);
  std::vector<int> idx(4);
  TopkMasks none;
  beam_topk_cpu(logits.data(), nullptr, running.data(), 1, 2, 3, 4, none, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{0, 1, 2, 5}));  // ties: lower index first
  EXPECT_NEAR(s[0], third, 1e-6f);
  EXPECT_NEAR(s[3], l58 - 1, 1e-6f);
  TopkMasks pad;
  pad.pad_id = 0;
  beam_topk_cpu(logits.data(), nullptr, running.data(), 1, 2, 3, 4, pad, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{1, 2, 5, 4}));
  EXPECT_NEAR(s[3], l28 - 1, 1e-6f);
  // bias (0, -ln2, -ln5) makes row 1 uniform
  const std::vector<float> bias = {0, -std::log(2.f), -std::log(5.f)};
  beam_topk_cpu(logits.data() + 3, bias.data(), running.data(), 1, 1, 3, 2, none, s.data(),
                idx.data());
  EXPECT_EQ(idx[0], 0);
  EXPECT_NEAR(s[0], third, 1e-6f);
  TopkMasks force;
  force.eos_id = 2;
  force.force_eos = true;
  s.assign(3, 0.f);
  idx.assign(3, -1);
  beam_topk_cpu(logits.data(), nullptr, running.data(), 1, 2, 3, 3, force, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{2, 5, 0}));
  EXPECT_EQ(s[0], 0.f);
  EXPECT_EQ(s[1], -1.f);
  EXPECT_EQ(s[2], -kInf);
  force.forced_eos_keeps_logp = true;  // row 0: -ln 3 + 0, row 1: ln(5/8) - 1
  beam_topk_cpu(logits.data(), nullptr, running.data(), 1, 2, 3, 3, force, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{2, 5, 0}));
  EXPECT_NEAR(s[0], third, 1e-6f);
  EXPECT_NEAR(s[1], l58 - 1, 1e-6f);
  TopkMasks no_eos;
  no_eos.eos_id = 2;
  no_eos.mask_eos = true;
  s.assign(2, 0.f);
  idx.assign(2, -1);
  beam_topk_cpu(logits.data(), nullptr, running.data(), 1, 2, 3, 2, no_eos, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace nmt::kernels
