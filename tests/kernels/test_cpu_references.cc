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
  // biases and kv_index: query batch 0 reads kv batch 1 (keys (0, 1), (1, 0); values swapped)
  const std::vector<float> k2 = {9, 9, 9, 9, 0, 1, 1, 0}, v2 = {9, 9, 9, 9, 3, 4, 1, 2};
  const std::vector<float> qb = {1, -1}, vb = {10, 20};
  const int kv_index[] = {1};
  auto b = packed_args(q.data(), k2.data(), v2.data(), out.data(), 1, 1, 2, 1, 2);
  b.q_bias = qb.data();  // q + qb = (2, -1): scores (-1, 2)
  b.v_bias = vb.data();
  b.kv_index = kv_index;
  attention_cpu(b);
  const float e3 = 0.95257413f;  // e^3 / (1 + e^3)
  EXPECT_NEAR(out[0], (1 - e3) * 3 + e3 * 1 + 10, 1e-5f);
  EXPECT_NEAR(out[1], (1 - e3) * 4 + e3 * 2 + 20, 1e-5f);
  EXPECT_THROW(attention_scores_cpu(b, s.data()), std::invalid_argument);
}

TEST(CpuReference, DecoderSelfAttention) {
  // 2 rows, 1 head of size 2, capacity 3, step 1, a dense cache (token c * 3 + j). Row 0's
  // position 0 lives in cache row 1's token (3); each row writes position 1 into its own.
  const std::vector<float> qkv = {1, 0, 5, 6, 7, 8,    // row 0: q | k | v
                                  0, 1, 1, 2, 3, 4};   // row 1
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0};
  std::vector<float> kc(12, 0.f), vc(12, 0.f);
  kc[2 * 3 + 0] = 1;  // cache row 1, position 0: key (1, 0), value (10, 20)
  vc[2 * 3 + 0] = 10;
  vc[2 * 3 + 1] = 20;
  const int key_rows[] = {3, 1, -1, 3, 4, -1};
  const int step = 1;
  std::vector<float> out(4, -7.f);
  DecoderSelfAttentionArgs<float> a;
  a.qkv = qkv.data(); a.bias = bias.data(); a.k_cache = kc.data(); a.v_cache = vc.data();
  a.key_rows = key_rows; a.step = &step; a.out = out.data();
  a.rows = 2; a.capacity = 3; a.heads = 1; a.head_dim = 2;
  decoder_self_attention_cpu(a);
  EXPECT_EQ(kc[0 * 6 + 2], 5.f);  // appended at (row 0, position 1)
  EXPECT_EQ(vc[1 * 6 + 3], 4.f);  // and (row 1, position 1)
  // row 0: q (1, 0) . keys (1, 0), (5, 6) = 1, 5: weights 1 / (1 + e^4), e^4 / (1 + e^4)
  const float w = 0.98201379f;
  EXPECT_NEAR(out[0], (1 - w) * 10 + w * 7, 1e-5f);
  EXPECT_NEAR(out[1], (1 - w) * 20 + w * 8, 1e-5f);
  // row 1: q (0, 1) . keys (1, 0), (1, 2) = 0, 2
  const float w1 = 0.88079708f;
  EXPECT_NEAR(out[2], (1 - w1) * 10 + w1 * 3, 1e-5f);
}

TEST(CpuReference, DecoderSelfAttentionPerRow) {
  // Step-level batching: row 0 owns cache row 1 at position 1 (its position 0 is its own,
  // key (1, 0), value (10, 20)); row 1 owns cache row 0 at position 0 (a sentence that just
  // joined). No common step.
  const std::vector<float> qkv = {1, 0, 5, 6, 7, 8,    // row 0: q | k | v
                                  0, 1, 1, 2, 3, 4};   // row 1
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0};
  std::vector<float> kc(12, 0.f), vc(12, 0.f);
  kc[3 * 2 + 0] = 1;  // cache row 1, position 0
  vc[3 * 2 + 0] = 10;
  vc[3 * 2 + 1] = 20;
  const int key_rows[] = {0, -1, -1, 3, 4, -1};  // the tokens of positions written and being written
  const int positions[] = {1, 0}, cache_rows[] = {1, 0};
  std::vector<float> out(4, -7.f);
  DecoderSelfAttentionArgs<float> a;
  a.qkv = qkv.data(); a.bias = bias.data(); a.k_cache = kc.data(); a.v_cache = vc.data();
  a.key_rows = key_rows; a.positions = positions; a.cache_rows = cache_rows; a.out = out.data();
  a.rows = 2; a.capacity = 3; a.heads = 1; a.head_dim = 2;
  decoder_self_attention_cpu(a);
  EXPECT_EQ(kc[(1 * 3 + 1) * 2 + 1], 6.f);  // row 0 appended at (cache row 1, position 1)
  EXPECT_EQ(vc[(0 * 3 + 0) * 2 + 0], 3.f);  // row 1 at (cache row 0, position 0)
  EXPECT_EQ(kc[(0 * 3 + 1) * 2], 0.f);      // and nowhere else
  const float w = 0.98201379f;  // as above: scores 1, 5
  EXPECT_NEAR(out[0], (1 - w) * 10 + w * 7, 1e-5f);
  EXPECT_NEAR(out[1], (1 - w) * 20 + w * 8, 1e-5f);
  EXPECT_FLOAT_EQ(out[2], 3.f);  // one key: its own value
  EXPECT_FLOAT_EQ(out[3], 4.f);
}

TEST(CpuReference, Elementwise) {
  const std::vector<float> emb = {1, 2, 3, 4, 5, 6}, pos = {10, 20, 30, 40};
  const int ids[] = {2, 0}, positions[] = {1, 0};
  std::vector<float> out(4);
  embed_positions_cpu(ids, emb.data(), pos.data(), positions, out.data(), 2, 2, 2.f);
  EXPECT_EQ(out, (std::vector<float>{40, 52, 12, 24}));
  add_bias_cpu(out.data(), std::vector<float>{1, -1}.data(), 2, 2);
  EXPECT_EQ(out, (std::vector<float>{41, 51, 13, 23}));
  // a decode step: every row at position *step
  const int step = 1;
  embed_positions_cpu(ids, emb.data(), pos.data(), nullptr, out.data(), 2, 2, 1.f, &step);
  EXPECT_EQ(out, (std::vector<float>{35, 46, 31, 42}));
  // key-row table after step 2: rows take parents {1, 1, 0}; position 2 is each row's own
  // token (dense: c * 4 + 2)
  const std::vector<int> old_rows = {0, 0, -1, -1, 1, 1, -1, -1, 2, 0, -1, -1};
  std::vector<int> new_rows(12, -1);
  const int parent[] = {1, 1, 0}, t = 2;
  beam_reorder_key_rows_cpu(old_rows.data(), new_rows.data(), parent, 3, 4, &t);
  EXPECT_EQ(new_rows, (std::vector<int>{1, 1, 2, -1, 1, 1, 6, -1, 0, 0, 10, -1}));
  // per-row positions and cache rows: row 0 (cache row 2, position 2) continues cache row 1;
  // row 1 (cache row 0, position 0) just joined; cache row 1's table is not touched
  const int row_positions[] = {2, 0}, cache_rows[] = {2, 0}, parents[] = {1, 0};
  new_rows.assign(12, -1);
  beam_reorder_key_rows_cpu(old_rows.data(), new_rows.data(), parents, 2, 4, nullptr,
                            row_positions, cache_rows);
  EXPECT_EQ(new_rows, (std::vector<int>{0, -1, -1, -1, -1, -1, -1, -1, 1, 1, 10, -1}));
  // the tokens each row writes given (the decode state's blocks)
  const int tokens[] = {17, 9};
  new_rows.assign(12, -1);
  beam_reorder_key_rows_cpu(old_rows.data(), new_rows.data(), parents, 2, 4, nullptr,
                            row_positions, cache_rows, tokens);
  EXPECT_EQ(new_rows, (std::vector<int>{9, -1, -1, -1, -1, -1, -1, -1, 1, 1, 17, -1}));
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
  TopkMasks no_eos;
  no_eos.eos_id = 2;
  no_eos.mask_eos = true;
  s.assign(2, 0.f);
  idx.assign(2, -1);
  beam_topk_cpu(logits.data(), nullptr, running.data(), 1, 2, 3, 2, no_eos, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{0, 1}));
  // per-sentence flags (two sentences of one row each) override the global force_eos:
  // sentence 0 forced to EOS, sentence 1 (probabilities 1/8, 2/8, 5/8) with EOS masked
  const unsigned char flags[] = {kTopkForceEos, kTopkMaskEos};
  TopkMasks per_sentence = force;
  per_sentence.sentence_flags = flags;
  s.assign(4, 0.f);
  idx.assign(4, -1);
  beam_topk_cpu(logits.data(), nullptr, running.data(), 2, 1, 3, 2, per_sentence, s.data(),
                idx.data());
  EXPECT_EQ(idx, (std::vector<int>{2, 0, 1, 0}));
  EXPECT_EQ(s[0], 0.f);
  EXPECT_EQ(s[1], -kInf);
  EXPECT_NEAR(s[2], l28 - 1, 1e-6f);
  EXPECT_NEAR(s[3], -2.0794415f - 1, 1e-6f);  // log(1/8) - 1
  // forced tokens (kTopkForceToken): sentence 0 forced to token 1, sentence 1 to token 0 but
  // forced to EOS as well, which wins
  const unsigned char forcing[] = {kTopkForceToken, kTopkForceToken | kTopkForceEos};
  const int forced_tokens[] = {1, 0};
  TopkMasks forced = force;
  forced.force_eos = false;
  forced.sentence_flags = forcing;
  forced.forced_tokens = forced_tokens;
  s.assign(4, 0.f);
  idx.assign(4, -1);
  beam_topk_cpu(logits.data(), nullptr, running.data(), 2, 1, 3, 2, forced, s.data(), idx.data());
  EXPECT_EQ(idx, (std::vector<int>{1, 0, 2, 0}));
  EXPECT_EQ(s[0], 0.f);
  EXPECT_EQ(s[1], -kInf);
  EXPECT_EQ(s[2], -1.f);
  EXPECT_EQ(s[3], -kInf);
}

// beam_topk_cuda's kernel choice (kernels/cpu/topk.cc): the one-pass chunks only where they
// were measured faster than the two-pass chunks (>= 512 rows wider than 16384 tokens); every
// smaller step, the demo model's 8001-token rows included, keeps the paths it had before.
TEST(BeamTopkDispatch, OnePassOnlyForLargeWideSteps) {
  for (int64_t rows : {1, 4, 8, 64, 127, 128, 256, 511})
    for (int vocab : {8001, 16384, 16385, 58101})
      EXPECT_NE(beam_topk_path(rows, vocab, 8), BeamTopkPath::kOnePass)
          << rows << " rows x " << vocab;
  for (int64_t rows : {512, 1024, 4096})
    for (int k : {1, 8, 32}) {
      EXPECT_EQ(beam_topk_path(rows, 58101, k), BeamTopkPath::kOnePass) << rows << " rows";
      EXPECT_NE(beam_topk_path(rows, 8001, k), BeamTopkPath::kOnePass) << rows << " rows";
    }
  EXPECT_EQ(beam_topk_path(4, 8001, 8), BeamTopkPath::kTwoPass);     // demo model, batch 1
  EXPECT_EQ(beam_topk_path(256, 8001, 8), BeamTopkPath::kRow);       // demo model, batch 64
  EXPECT_EQ(beam_topk_path(128, 12000, 32), BeamTopkPath::kTwoPass);  // k > 8: no row kernel
  // the workspace holds each path's candidates: the padded k per chunk, 2 x that one-pass
  const size_t per_chunk_k8 = 2 * sizeof(float) + 8 * (sizeof(float) + sizeof(int));
  EXPECT_EQ(beam_topk_workspace_bytes(1, 4, 58101, 8),
            size_t(4 * beam_topk_splits(4, 58101)) * per_chunk_k8);
  EXPECT_EQ(beam_topk_workspace_bytes(128, 4, 58101, 8),
            size_t(512 * beam_topk_splits(512, 58101)) *
                (2 * sizeof(float) + 16 * (sizeof(float) + sizeof(int))));
}

// The two-pass path's chunks fit topk_held_kernel's registers (at most
// kBeamTopkHeldChunkTokens) wherever 64 chunks a row allow it, at every row count: wider
// chunks went to topk_score_kernel's per-thread lists at twice the time (end-to-end run 47).
TEST(BeamTopkDispatch, TwoPassChunksHeldWhereTheVocabularyAllows) {
  for (int64_t rows : {1, 4, 8, 9, 64, 71, 72, 128, 256, 400, 508})
    for (int vocab : {8001, 16385, 32003, 58101, 250000}) {
      if (beam_topk_path(rows, vocab, 8) != BeamTopkPath::kTwoPass) continue;
      const int splits = beam_topk_splits(rows, vocab);
      EXPECT_LE((vocab + splits - 1) / splits, kBeamTopkHeldChunkTokens) << rows << " rows x " << vocab;
    }
  EXPECT_EQ(beam_topk_splits(256, 58101), 15);  // Transformer-base, batch 64: was 5
  EXPECT_EQ(beam_topk_splits(4, 58101), 32);    // batch 1: as many as before
  EXPECT_EQ(beam_topk_splits(2, 300000), 64);   // past 64 x 4096 tokens the chunks are wider
}

}  // namespace
}  // namespace nmt::kernels
