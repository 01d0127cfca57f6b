// Float32 CPU engine: the reference implementation of DESIGN.md §3 that the CUDA engine and
// the golden tests are checked against.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>

#include "kernels/activation.h"
#include "kernels/layer_norm.h"
#include "kernels/softmax.h"
#include "model/cpu/dense.h"
#include "model/cpu_engine.h"
#include "model/error.h"

namespace nmt {
namespace {

using cpu::AttentionShape;
using cpu::Linear;

struct Norm {
  const float* gamma;
  const float* beta;
  static Norm from(const Weights& w, const std::string& p) {
    return {w.get(p + ".weight").data.data(), w.get(p + ".bias").data.data()};
  }
};

struct AttentionWeights {
  Linear q, k, v, out;
  static AttentionWeights from(const Weights& w, const std::string& p) {
    return {Linear::from(w, p + "q_proj"), Linear::from(w, p + "k_proj"),
            Linear::from(w, p + "v_proj"), Linear::from(w, p + "out_proj")};
  }
};

struct EncoderLayer {
  AttentionWeights self_attn;
  Norm self_norm;
  Linear fc1, fc2;
  Norm final_norm;
};

struct DecoderLayer {
  AttentionWeights self_attn;
  Norm self_norm;
  AttentionWeights cross_attn;
  Norm cross_norm;
  Linear fc1, fc2;
  Norm final_norm;
};

class CpuEngine : public Engine {
 public:
  CpuEngine(const ModelConfig& c, const Weights& w) : c_(c), w_(w) {
    for (int l = 0; l < c.encoder_layers; ++l) {
      const std::string p = layer_prefix(false, l);
      encoder_.push_back({AttentionWeights::from(w, p + "self_attn."),
                          Norm::from(w, p + "self_attn_layer_norm"), Linear::from(w, p + "fc1"),
                          Linear::from(w, p + "fc2"), Norm::from(w, p + "final_layer_norm")});
    }
    for (int l = 0; l < c.decoder_layers; ++l) {
      const std::string p = layer_prefix(true, l);
      decoder_.push_back({AttentionWeights::from(w, p + "self_attn."),
                          Norm::from(w, p + "self_attn_layer_norm"),
                          AttentionWeights::from(w, p + "encoder_attn."),
                          Norm::from(w, p + "encoder_attn_layer_norm"), Linear::from(w, p + "fc1"),
                          Linear::from(w, p + "fc2"), Norm::from(w, p + "final_layer_norm")});
    }
    embed_scale_ = c.scale_embedding ? std::sqrt(float(c.d_model)) : 1.f;
  }

  int vocab_size() const override { return c_.vocab_size; }

  std::vector<float> encoder_output(size_t sentence) const override {
    const int64_t d = c_.d_model;
    const float* begin = encoder_out_.data() + int64_t(sentence) * src_len_ * d;
    return std::vector<float>(begin, begin + lengths_.at(sentence) * d);
  }

  void encode(const std::vector<std::vector<int>>& source_ids, int beam) override {
    const int64_t d = c_.d_model;
    sentences_ = int64_t(source_ids.size());
    src_len_ = 0;
    lengths_.clear();
    for (const auto& s : source_ids) {
      if (int64_t(s.size()) > c_.max_positions) {
        throw Error(ErrorCode::kInvalidArgument,
                    "source sentence has " + std::to_string(s.size()) +
                        " tokens, more than the model's " + std::to_string(c_.max_positions) + " positions");
      }
      src_len_ = std::max<int64_t>(src_len_, int64_t(s.size()));
      lengths_.push_back(int64_t(s.size()));
    }
    const int64_t rows = sentences_ * src_len_;
    std::vector<int> ids(size_t(rows), c_.pad_id);
    std::vector<int> positions(static_cast<size_t>(rows));
    for (int64_t s = 0; s < sentences_; ++s) {
      for (int64_t t = 0; t < src_len_; ++t) {
        if (t < lengths_[s]) ids[s * src_len_ + t] = source_ids[s][t];
        positions[s * src_len_ + t] = int(t);
      }
    }
    std::vector<float> x(size_t(rows * d));
    embed(w_.encoder_embeddings(), w_.encoder_positions(), ids, positions, x.data());

    const int64_t heads = c_.encoder_heads;
    std::vector<float> q(x.size()), k(x.size()), v(x.size()), ctx(x.size()), tmp(x.size());
    for (const EncoderLayer& L : encoder_) {
      L.self_attn.q(x.data(), rows, q.data());
      L.self_attn.k(x.data(), rows, k.data());
      L.self_attn.v(x.data(), rows, v.data());
      for (int64_t s = 0; s < sentences_; ++s) {
        const int64_t o = s * src_len_ * d;
        cpu::attention(q.data() + o, k.data() + o, v.data() + o, ctx.data() + o,
                       AttentionShape{src_len_, src_len_, lengths_[s], heads, d / heads, d, d, d},
                       &scratch_);
      }
      L.self_attn.out(ctx.data(), rows, tmp.data());
      kernels::layer_norm_cpu(tmp.data(), x.data(), nullptr, L.self_norm.gamma, L.self_norm.beta,
                              x.data(), rows, d, c_.layer_norm_eps);
      feed_forward(L.fc1, L.fc2, L.final_norm, x.data(), rows);
    }
    encoder_out_ = x;
    // Cross-attention keys/values: once per sentence, shared by its beams.
    cross_k_.assign(decoder_.size(), std::vector<float>(x.size()));
    cross_v_.assign(decoder_.size(), std::vector<float>(x.size()));
    for (size_t l = 0; l < decoder_.size(); ++l) {
      decoder_[l].cross_attn.k(x.data(), rows, cross_k_[l].data());
      decoder_[l].cross_attn.v(x.data(), rows, cross_v_[l].data());
    }
    beam_ = beam;
    alive_.resize(size_t(sentences_));
    std::iota(alive_.begin(), alive_.end(), 0);
    cache_k_.assign(decoder_.size(), {});
    cache_v_.assign(decoder_.size(), {});
    cache_capacity_ = 0;
  }

  void step(const StepInput& in, StepOutput* out) override {
    const int64_t d = c_.d_model;
    const int64_t rows = int64_t(in.tokens->size());
    if (in.beam != beam_ || rows % beam_ != 0) {
      throw Error(ErrorCode::kInternal, "engine step: rows do not match the beam size");
    }
    if (in.step >= c_.max_positions) {
      throw Error(ErrorCode::kInvalidArgument, "decoding past the model's " +
                                                   std::to_string(c_.max_positions) + " positions");
    }
    if (in.parent_rows) reorder(*in.parent_rows, in.step);
    ensure_capacity(rows, in.step + 1);

    // Step buffers are members: a decode step allocates nothing once they have grown.
    for (auto* b : {&y_, &q_, &k_, &v_, &ctx_, &tmp_}) b->resize(size_t(rows * d));
    std::vector<float>& y = y_;
    std::vector<float>&q = q_, &k = k_, &v = v_, &ctx = ctx_, &tmp = tmp_;
    positions_.assign(size_t(rows), in.step);
    embed(w_.decoder_embeddings(), w_.decoder_positions(), *in.tokens, positions_, y.data());
    const int64_t heads = c_.decoder_heads, hd = d / heads, cap = cache_capacity_;
    for (size_t l = 0; l < decoder_.size(); ++l) {
      const DecoderLayer& L = decoder_[l];
      L.self_attn.q(y.data(), rows, q.data());
      L.self_attn.k(y.data(), rows, k.data());
      L.self_attn.v(y.data(), rows, v.data());
      float* ck = cache_k_[l].data();
      float* cv = cache_v_[l].data();
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(k.data() + r * d, d, ck + (r * cap + in.step) * d);
        std::copy_n(v.data() + r * d, d, cv + (r * cap + in.step) * d);
        cpu::attention(q.data() + r * d, ck + r * cap * d, cv + r * cap * d, ctx.data() + r * d,
                       AttentionShape{1, in.step + 1, in.step + 1, heads, hd, d, d, d}, &scratch_);
      }
      L.self_attn.out(ctx.data(), rows, tmp.data());
      kernels::layer_norm_cpu(tmp.data(), y.data(), nullptr, L.self_norm.gamma, L.self_norm.beta,
                              y.data(), rows, d, c_.layer_norm_eps);

      L.cross_attn.q(y.data(), rows, q.data());
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t s = alive_[size_t(r / beam_)];
        const int64_t o = s * src_len_ * d;
        cpu::attention(q.data() + r * d, cross_k_[l].data() + o, cross_v_[l].data() + o,
                       ctx.data() + r * d,
                       AttentionShape{1, src_len_, lengths_[s], heads, hd, d, d, d}, &scratch_);
      }
      L.cross_attn.out(ctx.data(), rows, tmp.data());
      kernels::layer_norm_cpu(tmp.data(), y.data(), nullptr, L.cross_norm.gamma, L.cross_norm.beta,
                              y.data(), rows, d, c_.layer_norm_eps);
      feed_forward(L.fc1, L.fc2, L.final_norm, y.data(), rows);
    }
    select_candidates(y.data(), rows, in, out);
  }

 private:
  void embed(const HostTensor& table, const HostTensor& pos, const std::vector<int>& ids,
             const std::vector<int>& positions, float* x) const {
    const int64_t d = c_.d_model;
    for (size_t r = 0; r < ids.size(); ++r) {
      if (ids[r] < 0 || ids[r] >= c_.vocab_size) {
        throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(ids[r]) + " is outside the vocabulary");
      }
      const float* e = table.data.data() + int64_t(ids[r]) * d;
      const float* p = pos.data.data() + int64_t(positions[r]) * d;
      for (int64_t j = 0; j < d; ++j) x[r * d + j] = e[j] * embed_scale_ + p[j];
    }
  }

  // x = LN(x + fc2(act(fc1(x))))
  void feed_forward(const Linear& fc1, const Linear& fc2, const Norm& norm, float* x, int64_t rows) {
    hidden_.resize(size_t(rows * fc1.out));
    ffn_out_.resize(size_t(rows * fc2.out));
    fc1(x, rows, hidden_.data());
    kernels::bias_activation_cpu(hidden_.data(), nullptr, rows, fc1.out, c_.activation);
    fc2(hidden_.data(), rows, ffn_out_.data());
    kernels::layer_norm_cpu(ffn_out_.data(), x, nullptr, norm.gamma, norm.beta, x, rows, c_.d_model,
                            c_.layer_norm_eps);
  }

  // Keeps row parent[i] of the caches as row i; finished sentences' rows disappear.
  void reorder(const std::vector<int>& parent, int step) {
    const int64_t d = c_.d_model, cap = cache_capacity_;
    for (size_t l = 0; l < decoder_.size(); ++l) {
      for (auto* cache : {&cache_k_[l], &cache_v_[l]}) {
        // Gather into the spare buffer and swap: the buffers trade places every step
        // instead of being allocated anew.
        spare_.resize(parent.size() * size_t(cap * d));
        for (size_t r = 0; r < parent.size(); ++r) {
          std::copy_n(cache->data() + int64_t(parent[r]) * cap * d, int64_t(step) * d,
                      spare_.data() + int64_t(r) * cap * d);
        }
        cache->swap(spare_);
      }
    }
    std::vector<int64_t> alive;
    for (size_t g = 0; g * size_t(beam_) < parent.size(); ++g) {
      alive.push_back(alive_[size_t(parent[g * size_t(beam_)] / beam_)]);
    }
    alive_.swap(alive);
  }

  // Grows the [rows, capacity, d] caches (doubling) so that `positions` fit; rows already
  // match the step's rows (set by encode or reorder).
  void ensure_capacity(int64_t rows, int64_t positions) {
    if (positions <= cache_capacity_) return;
    const int64_t d = c_.d_model, cap = std::max<int64_t>(16, 2 * positions);
    for (size_t l = 0; l < decoder_.size(); ++l) {
      for (auto* cache : {&cache_k_[l], &cache_v_[l]}) {
        std::vector<float> next(size_t(rows * cap * d), 0.f);
        for (int64_t r = 0; cache_capacity_ > 0 && r < rows; ++r) {
          std::copy_n(cache->data() + r * cache_capacity_ * d, cache_capacity_ * d, next.data() + r * cap * d);
        }
        cache->swap(next);
      }
    }
    cache_capacity_ = cap;
  }

  void select_candidates(const float* y, int64_t rows, const StepInput& in, StepOutput* out) {
    const int64_t vocab = c_.vocab_size;
    const Linear proj{w_.output_projection().data.data(), w_.output_bias().data.data(), c_.d_model, vocab};
    logits_.resize(size_t(rows * vocab));
    proj(y, rows, logits_.data());
    kernels::SoftmaxOptions opt;
    opt.log = true;
    kernels::softmax_cpu(logits_.data(), logits_.data(), rows, vocab, opt);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
      float* lp = logits_.data() + r * vocab;
      const float running = (*in.running_scores)[size_t(r)];
      if (in.force_eos) {  // as transformers' ForcedEOSTokenLogitsProcessor: EOS gets log p = 0
        std::fill(lp, lp + vocab, neg_inf);
        lp[c_.eos_id] = 0.f;
      }
      lp[c_.pad_id] = neg_inf;
      if (in.mask_eos) lp[c_.eos_id] = neg_inf;
      for (int64_t t = 0; t < vocab; ++t) lp[t] += running;
    }
    const int64_t per_sentence = in.beam * vocab;
    const int64_t groups = rows / in.beam;
    out->scores.resize(size_t(groups * in.k));
    out->candidates.resize(size_t(groups * in.k));
    std::vector<int> order(static_cast<size_t>(per_sentence));
    for (int64_t g = 0; g < groups; ++g) {
      const float* s = logits_.data() + g * per_sentence;
      std::iota(order.begin(), order.end(), 0);
      // Best first; equal scores keep the lower index first, as torch.topk does.
      std::partial_sort(order.begin(), order.begin() + in.k, order.end(),
                        [s](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
      for (int j = 0; j < in.k; ++j) {
        out->scores[size_t(g * in.k + j)] = s[order[size_t(j)]];
        out->candidates[size_t(g * in.k + j)] = order[size_t(j)];
      }
    }
  }

  const ModelConfig c_;
  const Weights& w_;
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  float embed_scale_ = 1.f;

  int64_t sentences_ = 0, src_len_ = 0;
  std::vector<int64_t> lengths_;
  std::vector<int64_t> alive_;  // batch index of each alive sentence, in row-group order
  int beam_ = 1;
  std::vector<float> encoder_out_;                     // [sentences, src_len, d]
  std::vector<std::vector<float>> cross_k_, cross_v_;  // per layer [sentences, src_len, d]
  std::vector<std::vector<float>> cache_k_, cache_v_;  // per layer [rows, capacity, d]
  int64_t cache_capacity_ = 0;
  std::vector<float> scratch_, hidden_, ffn_out_, logits_;
  std::vector<float> y_, q_, k_, v_, ctx_, tmp_, spare_;  // decode-step buffers
  std::vector<int> positions_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& config, const Weights& weights) {
  // A decode step multiplies a few rows at a time, where OpenBLAS's threads cost more than
  // they save (measured on 2 cores: 3x slower at batch 1, 1.4x at batch 32). One thread
  // unless the user asks otherwise through OPENBLAS_NUM_THREADS.
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  return std::make_unique<CpuEngine>(config, weights);
}

}  // namespace nmt
