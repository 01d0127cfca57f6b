// Float32 CPU engine: the reference implementation of docs/models.md that the CUDA engine and
// the golden tests are checked against. One layer routine per stack for every family: where
// the norms sit and which extra norms there are come from the model's Architecture.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "kernels/activation.h"
#include "kernels/cpu/layer_norm_fast.h"
#include "kernels/cpu/vector_math.h"
#include "model/cpu/buffer.h"
#include "model/cpu/candidates.h"
#include "model/cpu/dense.h"
#include "model/cpu/gemm.h"
#include "model/cpu/kv_state.h"
#include "model/cpu_engine.h"
#include "model/error.h"
#include "model/host_memory.h"

namespace nmt {
namespace {

using cpu::AttentionShape;
using cpu::FloatBuffer;
using cpu::grow;
using cpu::KvState;
using cpu::Linear;

struct Norm {
  const float* gamma = nullptr;
  const float* beta = nullptr;
  static Norm from(const Weights& w, const std::string& p) {
    return {w.get(p + ".weight").data.data(), w.get(p + ".bias").data.data()};
  }
};

// Self-attention: Q, K and V of the same rows in one product, qkv [rows, 3d].
struct SelfAttentionWeights {
  Linear qkv, out;
  static SelfAttentionWeights from(const Weights& w, const std::string& p) {
    return {Linear::concat({Linear::from(w, p + "q_proj"), Linear::from(w, p + "k_proj"),
                            Linear::from(w, p + "v_proj")}),
            Linear::from(w, p + "out_proj")};
  }
};

// Cross-attention: Q of the decoder's rows; K and V of the encoder's in one product, kv [rows, 2d].
struct CrossAttentionWeights {
  Linear q, kv, out;
  static CrossAttentionWeights from(const Weights& w, const std::string& p) {
    return {Linear::from(w, p + "q_proj"),
            Linear::concat({Linear::from(w, p + "k_proj"), Linear::from(w, p + "v_proj")}),
            Linear::from(w, p + "out_proj")};
  }
};

struct EncoderLayer {
  SelfAttentionWeights self_attn;
  Norm self_norm;
  Linear fc1, fc2;
  Norm final_norm;
};

struct DecoderLayer {
  SelfAttentionWeights self_attn;
  Norm self_norm;
  CrossAttentionWeights cross_attn;
  Norm cross_norm;
  Linear fc1, fc2;
  Norm final_norm;
};

class CpuEngine : public Engine {
 public:
  CpuEngine(const ModelConfig& c, const Weights& w, size_t memory_limit, int threads, bool int8)
      : c_(c), w_(w), kv_(c.decoder_layers, c.d_model, memory_limit),
        threads_(threads > 0 ? threads : omp_get_num_procs()) {
    scratch_.resize(size_t(threads_));
    row_scratch_.resize(size_t(threads_));
    for (int l = 0; l < c.encoder_layers; ++l) {
      const std::string p = layer_prefix(false, l);
      encoder_.push_back({SelfAttentionWeights::from(w, p + "self_attn."),
                          Norm::from(w, p + "self_attn_layer_norm"), Linear::from(w, p + "fc1"),
                          Linear::from(w, p + "fc2"), Norm::from(w, p + "final_layer_norm")});
    }
    for (int l = 0; l < c.decoder_layers; ++l) {
      const std::string p = layer_prefix(true, l);
      decoder_.push_back({SelfAttentionWeights::from(w, p + "self_attn."),
                          Norm::from(w, p + "self_attn_layer_norm"),
                          CrossAttentionWeights::from(w, p + "encoder_attn."),
                          Norm::from(w, p + "encoder_attn_layer_norm"), Linear::from(w, p + "fc1"),
                          Linear::from(w, p + "fc2"), Norm::from(w, p + "final_layer_norm")});
    }
    if (c.arch.final_encoder_norm) encoder_final_norm_ = Norm::from(w, Weights::kEncoderFinalNorm);
    if (c.arch.final_decoder_norm) decoder_final_norm_ = Norm::from(w, Weights::kDecoderFinalNorm);
    if (c.arch.embedding_norm) {
      encoder_embedding_norm_ = Norm::from(w, Weights::kEncoderEmbeddingNorm);
      decoder_embedding_norm_ = Norm::from(w, Weights::kDecoderEmbeddingNorm);
    }
    embed_scale_ = c.scale_embedding ? std::sqrt(float(c.d_model)) : 1.f;
    proj_ = Linear{w.output_projection().data.data(), w.output_bias().data.data(), c.d_model, c.target_vocab_size};
    // a zero bias added copied rows x vocab floats per step
    if (w.output_bias_is_zero()) proj_.b = nullptr;
    // int8: weights quantized per row; float32: packed once for oneDNN's matmul.
    for_each_linear(*this, [int8](Linear& x) { int8 ? x.quantize() : x.pack(); });
  }

  // Every linear layer of the engine (self: a CpuEngine or a const one).
  template <class Self, class F>
  static void for_each_linear(Self& self, F&& f) {
    for (auto& L : self.encoder_)
      for (auto* x : {&L.self_attn.qkv, &L.self_attn.out, &L.fc1, &L.fc2}) f(*x);
    for (auto& L : self.decoder_)
      for (auto* x : {&L.self_attn.qkv, &L.self_attn.out, &L.cross_attn.q, &L.cross_attn.kv, &L.cross_attn.out,
                      &L.fc1, &L.fc2})
        f(*x);
    f(self.proj_);
  }

  int vocab_size() const override { return c_.target_vocab_size; }
  EngineCapacity capacity() const override { return cap_; }

  std::vector<float> encoder_output(size_t sentence) const override {
    const int64_t d = c_.d_model;
    const float* begin = encoder_out_.data() + int64_t(sentence) * src_len_ * d;
    return std::vector<float>(begin, begin + lengths_.at(sentence) * d);
  }

  // The capacity is logical (docs/data-flow.md, "Decode-state memory"): tables of a slot's and
  // a cache row's blocks, which cost nothing until a sentence takes them; the blocks come as
  // tokens arrive (encode, step) and go at release().
  void reserve(const EngineCapacity& want) override {
    EngineCapacity next{std::max(cap_.sentences, want.sentences), std::max(cap_.rows, want.rows),
                        std::max(cap_.source_tokens, want.source_tokens)};
    if (next.source_tokens > c_.max_positions) {
      throw Error(ErrorCode::kInvalidArgument,
                  "decode slots of " + std::to_string(next.source_tokens) + " source tokens exceed the model's " +
                      std::to_string(c_.max_positions) + " positions");
    }
    // A limit that cannot hold one sentence of the longest source (and its first cache row's
    // block) would fail every sentence: refused here, where the server's start names the keys.
    if (!kv_.fits(kv_.blocks_for_tokens(next.source_tokens) + 1)) throw out_of_memory();
    kv_.resize(next.sentences, next.rows);
    cap_ = next;
  }

  void release(int slot, const std::vector<int>& rows) override {
    kv_.release(slot, rows);
    if (!kv_.empty() || step_buffer_bytes() <= kCpuKeptStepBufferBytes) return;
    // No sentence left: step buffers past the few MiB that a Translator's next batch would
    // fault in afresh (sized by the largest step: logits rows x vocab) go too, and malloc
    // gives the freed pages back.
    for (auto* b : {&encoder_out_, &hidden_, &ffn_out_, &logits_, &y_, &q_, &qkv_, &ctx_, &tmp_, &normed_,
                    &row_scores_})
      FloatBuffer().swap(*b);
    for (auto& v : scratch_) std::vector<float>().swap(v);
    for (auto& v : row_scratch_) std::vector<double>().swap(v);
    std::vector<int>().swap(row_tokens_);
    release_free_heap_memory();
  }

  void encode(const std::vector<EncodeItem>& items) override {
    cpu::set_threads(threads_);  // OpenMP's count is per calling thread: the loop's may differ
    const int64_t d = c_.d_model;
    const int64_t n = int64_t(items.size());
    src_len_ = 0;
    lengths_.clear();
    for (const EncodeItem& item : items) {
      const int64_t len = int64_t(item.ids->size());
      if (len == 0) throw Error(ErrorCode::kInvalidArgument, "empty source sentence (no tokens)");
      if (len > cap_.source_tokens) {
        throw Error(ErrorCode::kInvalidArgument,
                    "source sentence has " + std::to_string(len) + " tokens, more than the " +
                        std::to_string(cap_.source_tokens) + " a decode slot holds");
      }
      if (item.slot < 0 || item.slot >= cap_.sentences) throw Error(ErrorCode::kInternal, "encode: slot out of range");
      src_len_ = std::max(src_len_, len);
      lengths_.push_back(len);
    }
    if (!kv_.fits(encode_blocks(items))) throw out_of_memory();
    const int64_t rows = n * src_len_;
    std::vector<int>& ids = enc_ids_;
    std::vector<int>& positions = enc_positions_;
    ids.assign(size_t(rows), c_.pad_id);
    positions.resize(size_t(rows));
    for (int64_t s = 0; s < n; ++s) {
      int counted = 0;  // the sentence's tokens so far that are not <pad>
      for (int64_t t = 0; t < src_len_; ++t) {
        const int64_t r = s * src_len_ + t;
        if (t < lengths_[s]) ids[r] = (*items[size_t(s)].ids)[size_t(t)];
        // M2M-100 numbers the tokens that are not <pad> (fairseq's make_positions: a <pad>
        // inside a source shifts the positions after it); a <pad> gets the zero vector.
        if (c_.arch.pad_position_zero) {
          positions[r] = ids[r] == c_.pad_id ? kZeroPosition : counted++;
        } else {
          positions[r] = int(t);
        }
      }
    }
    // Members: an admission allocates nothing once they have grown.
    FloatBuffer& x = encoder_out_;
    grow(&x, size_t(rows * d));
    embed(w_.encoder_embeddings(), c_.vocab_size, w_.encoder_positions(), encoder_embedding_norm_, ids, positions,
          x.data());

    const int64_t heads = c_.encoder_heads;
    grow(&qkv_, size_t(rows * 3 * d));
    for (auto* b : {&ctx_, &tmp_}) grow(b, size_t(rows * d));
    FloatBuffer &qkv = qkv_, &ctx = ctx_, &tmp = tmp_;
    for (const EncoderLayer& L : encoder_) {
      L.self_attn.qkv(sublayer_input(L.self_norm, x.data(), rows), rows, qkv.data());
#pragma omp parallel for schedule(dynamic)
      for (int64_t s = 0; s < n; ++s) {
        const float* q = qkv.data() + s * src_len_ * 3 * d;
        // Keys up to the sentence's own length: its result does not depend on the padding
        // that other sentences of the admission bring.
        cpu::attention(q, q + d, q + 2 * d, ctx.data() + s * src_len_ * d,
                       AttentionShape{src_len_, lengths_[s], lengths_[s], heads, d / heads, 3 * d, 3 * d, d},
                       &scratch_[size_t(omp_get_thread_num())]);
      }
      L.self_attn.out(ctx.data(), rows, tmp.data());
      residual(L.self_norm, tmp.data(), x.data(), rows);
      feed_forward(L.fc1, L.fc2, L.final_norm, x.data(), rows);
    }
    if (c_.arch.final_encoder_norm) normalize(encoder_final_norm_, x.data(), rows);
    // Cross-attention keys/values: once per sentence, shared by its beams, into its slot's
    // blocks (a block holds every layer's keys/values of its tokens: KvState).
    for (int64_t s = 0; s < n; ++s) kv_.fill_slot(items[size_t(s)].slot, lengths_[s]);
    for (size_t l = 0; l < decoder_.size(); ++l) {
      decoder_[l].cross_attn.kv(x.data(), rows, qkv.data());
      const int64_t offset = kv_.layer_offset(int64_t(l));
      for (int64_t s = 0; s < n; ++s) {
        const int slot = items[size_t(s)].slot;
        for (int64_t j = 0; j < lengths_[s]; ++j)
          std::copy_n(qkv.data() + (s * src_len_ + j) * 2 * d, 2 * d, kv_.slot_token(slot, j) + offset);
      }
    }
  }

  // Out of memory throws before anything changed (the step's blocks and its encode's are
  // counted first), so the decode loop can shed sentences and repeat the step.
  void step(const StepInput& in, StepOutput* out) override {
    cpu::set_threads(threads_);
    const int64_t rows = check_step(in);
    row_position_.clear();
    for (const StepGroup& g : in.groups) row_position_.insert(row_position_.end(), size_t(g.beam), g.position);
    for (int64_t r = 0; r < rows; ++r) {
      if (kv_.row_length(in.parent_rows[size_t(r)]) < row_position_[size_t(r)])
        throw Error(ErrorCode::kInternal, "engine step: a row continues a cache row that does not hold its positions");
    }
    if (!kv_.fits(kv_.blocks_for_step(in.cache_rows, row_position_) + (in.encode ? encode_blocks(*in.encode) : 0)))
      throw out_of_memory();
    decoder_step(in, rows, out);
    if (in.encode) encode(*in.encode);  // one core: nothing to overlap
  }

 private:
  // The step's rows (check_step()) at row_position_.
  void decoder_step(const StepInput& in, int64_t rows, StepOutput* out) {
    const int64_t d = c_.d_model;
    out->scores.clear();
    out->candidates.clear();
    out->alignments.clear();
    out->logits.clear();
    if (rows == 0) return;
    row_slot_.clear();
    for (const StepGroup& g : in.groups) row_slot_.insert(row_slot_.end(), size_t(g.beam), g.slot);
    // Row r continues cache row parent_rows[r] into cache row cache_rows[r]: the history is
    // not copied, each cache row keeps a table of where its positions' keys are (the CUDA
    // engine's key-row table), and the row's own position goes into its own blocks. Beams of
    // a sentence keep their cache rows until it ends, so a position a table points to is
    // never overwritten while it is read.
    kv_.reorder(in.cache_rows, in.parent_rows, row_position_);

    // Step buffers are members: a decode step allocates nothing once they have grown.
    for (auto* b : {&y_, &q_, &ctx_, &tmp_}) grow(b, size_t(rows * d));
    grow(&qkv_, size_t(rows * 3 * d));
    FloatBuffer &y = y_, &q = q_, &qkv = qkv_, &ctx = ctx_, &tmp = tmp_;
    // M2M-100: a <pad> fed back (generate() does not ban it there) gets the zero position
    // vector; the positions after it are not shifted (transformers counts the cached ones).
    const std::vector<int>* positions = &row_position_;
    if (c_.arch.pad_position_zero) {
      embed_position_ = row_position_;
      for (size_t r = 0; r < embed_position_.size(); ++r) {
        if (in.tokens[r] == c_.pad_id) embed_position_[r] = kZeroPosition;
      }
      positions = &embed_position_;
    }
    embed(w_.decoder_embeddings(), c_.target_vocab_size, w_.decoder_positions(), decoder_embedding_norm_, in.tokens,
          *positions, y.data());
    const int64_t heads = c_.decoder_heads, hd = d / heads;
    for (size_t l = 0; l < decoder_.size(); ++l) {
      const DecoderLayer& L = decoder_[l];
      L.self_attn.qkv(sublayer_input(L.self_norm, y.data(), rows), rows, qkv.data());
      const int64_t offset = kv_.layer_offset(int64_t(l));
#pragma omp parallel for
      for (int64_t r = 0; r < rows; ++r) {
        const int c = in.cache_rows[size_t(r)];
        const int64_t t = row_position_[size_t(r)];
        const float* qr = qkv.data() + r * 3 * d;
        std::copy_n(qr + d, 2 * d, kv_.row_token(c, t) + offset);  // its key and value
        cpu::attend_row(qr, kv_.row_keys(c), offset, d, ctx.data() + r * d, t + 1, heads, hd,
                        &row_scratch_[size_t(omp_get_thread_num())]);
      }
      L.self_attn.out(ctx.data(), rows, tmp.data());
      residual(L.self_norm, tmp.data(), y.data(), rows);

      L.cross_attn.q(sublayer_input(L.cross_norm, y.data(), rows), rows, q.data());
#pragma omp parallel for
      for (int64_t r = 0; r < rows; ++r) {
        const int s = row_slot_[size_t(r)];
        cpu::attend_row(q.data() + r * d, kv_.slot_keys(s), offset, d, ctx.data() + r * d, kv_.slot_length(s),
                        heads, hd, &row_scratch_[size_t(omp_get_thread_num())]);
      }
      if (int(l) == alignment_layer(c_.decoder_layers)) row_alignments(in, q.data(), offset, out);
      L.cross_attn.out(ctx.data(), rows, tmp.data());
      residual(L.cross_norm, tmp.data(), y.data(), rows);
      feed_forward(L.fc1, L.fc2, L.final_norm, y.data(), rows);
    }
    if (c_.arch.final_decoder_norm) normalize(decoder_final_norm_, y.data(), rows);
    select_candidates(y.data(), rows, in, out);
  }

  // return_alignments: each asking group's rows get the argmax source position of this
  // layer's head-averaged cross-attention (StepOutput::alignments); q: the layer's queries.
  // Nothing is computed when no group asks.
  void row_alignments(const StepInput& in, const float* q, int64_t offset, StepOutput* out) {
    bool any = false;
    for (const StepGroup& g : in.groups) any = any || g.alignments;
    if (!any) return;
    const int64_t d = c_.d_model, heads = c_.decoder_heads;
    out->alignments.assign(in.tokens.size(), -1);
    int64_t first = 0;
    for (const StepGroup& g : in.groups) {
      for (int64_t r = first; g.alignments && r < first + g.beam; ++r) {
        out->alignments[size_t(r)] = cpu::attention_argmax(q + r * d, kv_.slot_keys(g.slot), offset,
                                                           kv_.slot_length(g.slot), heads, d / heads,
                                                           &row_scratch_[0]);
      }
      first += g.beam;
    }
  }

  // A position whose vector is zeros (M2M-100's <pad>, Architecture::pad_position_zero).
  static constexpr int kZeroPosition = -1;

  // x = embedding * scale + position (then the embedding norm where the family has one).
  // `vocab`: rows of `table` (the source and target vocabularies may differ).
  void embed(const HostTensor& table, int vocab, const HostTensor& pos, const Norm& norm, const std::vector<int>& ids,
             const std::vector<int>& positions, float* x) const {
    const int64_t d = c_.d_model;
    for (size_t r = 0; r < ids.size(); ++r) {
      if (ids[r] < 0 || ids[r] >= vocab) {
        throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(ids[r]) + " is outside the vocabulary");
      }
      const float* e = table.data.data() + int64_t(ids[r]) * d;
      if (positions[r] == kZeroPosition) {
        for (int64_t j = 0; j < d; ++j) x[r * d + j] = e[j] * embed_scale_ + 0.f;
        continue;
      }
      const float* p = pos.data.data() + int64_t(positions[r]) * d;
      for (int64_t j = 0; j < d; ++j) x[r * d + j] = e[j] * embed_scale_ + p[j];
    }
    if (c_.arch.embedding_norm) normalize(norm, x, int64_t(ids.size()));
  }

  // A sublayer's input: x itself (post-norm), or LN(x) (pre-norm) in normed_.
  const float* sublayer_input(const Norm& norm, const float* x, int64_t rows) {
    if (c_.arch.norm_order == NormOrder::kPost) return x;
    grow(&normed_, size_t(rows * c_.d_model));
    cpu::layer_norm(x, normed_.data(), norm.gamma, norm.beta, rows, c_.d_model, c_.layer_norm_eps);
    return normed_.data();
  }

  // The sublayer's output f joins the residual stream: x = LN(x + f) (post-norm) or
  // x = x + f (pre-norm, whose norm was on the input).
  void residual(const Norm& norm, const float* f, float* x, int64_t rows) const {
    const int64_t d = c_.d_model;
    if (c_.arch.norm_order == NormOrder::kPost) {
      cpu::add_layer_norm(f, x, norm.gamma, norm.beta, rows, d, c_.layer_norm_eps);
      return;
    }
#pragma omp parallel for if (rows * d >= (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < d; ++j) x[r * d + j] += f[r * d + j];
    }
  }

  // x = LN(x) in place: the final encoder / decoder norms and the embedding norm.
  void normalize(const Norm& norm, float* x, int64_t rows) const {
    cpu::layer_norm(x, x, norm.gamma, norm.beta, rows, c_.d_model, c_.layer_norm_eps);
  }

  // The feed-forward sublayer: x = LN(x + fc2(act(fc1(x)))) post-norm, or
  // x = x + fc2(act(fc1(LN(x)))) pre-norm.
  void feed_forward(const Linear& fc1, const Linear& fc2, const Norm& norm, float* x, int64_t rows) {
    grow(&hidden_, size_t(rows * fc1.out));
    grow(&ffn_out_, size_t(rows * fc2.out));
    fc1(sublayer_input(norm, x, rows), rows, hidden_.data());
    if (c_.activation == kernels::Activation::kSwish) {
      cpu::swish(hidden_.data(), rows * fc1.out);  // vectorized; the others are the reference's loop
    } else {
      kernels::bias_activation_cpu(hidden_.data(), nullptr, rows, fc1.out, c_.activation);
    }
    fc2(hidden_.data(), rows, ffn_out_.data());
    residual(norm, ffn_out_.data(), x, rows);
  }

  // Rows must match the groups, cache rows and slots be in range, positions in the model.
  int64_t check_step(const StepInput& in) const {
    size_t rows = 0;
    for (const StepGroup& g : in.groups) {
      if (g.slot < 0 || g.slot >= cap_.sentences || g.beam < 1 || g.k < 1 || g.k > g.beam * c_.target_vocab_size)
        throw Error(ErrorCode::kInternal, "engine step: a group's slot, beam or k is out of range");
      if (g.follows >= 0)  // Engine::submit(): only engines that overlap steps follow one
        throw Error(ErrorCode::kInternal, "engine step: the CPU engine computes each step at once and follows none");
      if (g.device_repetition())  // Engine::repetition_on_device(): the host sends the CPU its edits
        throw Error(ErrorCode::kInternal, "engine step: the CPU engine computes no repetition controls itself");
      if (g.forced_token >= c_.target_vocab_size)
        throw Error(ErrorCode::kInvalidArgument, "forced token id " + std::to_string(g.forced_token) +
                                                     " is outside the vocabulary");
      if (g.position >= c_.max_positions)
        throw Error(ErrorCode::kInvalidArgument,
                    "decoding past the model's " + std::to_string(c_.max_positions) + " positions");
      rows += size_t(g.beam);
    }
    if (in.tokens.size() != rows || in.cache_rows.size() != rows || in.parent_rows.size() != rows ||
        in.running_scores.size() != rows)
      throw Error(ErrorCode::kInternal, "engine step: rows do not match the groups");
    for (size_t r = 0; r < rows; ++r) {
      if (in.cache_rows[r] < 0 || in.cache_rows[r] >= cap_.rows || in.parent_rows[r] < 0 ||
          in.parent_rows[r] >= cap_.rows)
        throw Error(ErrorCode::kInternal, "engine step: cache row out of range");
    }
    check_token_edits(in, rows, c_.target_vocab_size);
    return int64_t(rows);
  }

  // The blocks an encode's sentences take.
  size_t encode_blocks(const std::vector<EncodeItem>& items) const {
    size_t blocks = 0;
    for (const EncodeItem& item : items) {
      if (item.slot >= 0 && item.slot < cap_.sentences) blocks += kv_.blocks_for_slot(item.slot, int64_t(item.ids->size()));
    }
    return blocks;
  }
  Error out_of_memory() const {
    return Error(ErrorCode::kResourceExhausted,
                 "out of memory: the decode state would hold more than the memory limit (" +
                     std::to_string(kv_.bytes() >> 20) + " MiB held)");
  }

  void select_candidates(const float* y, int64_t rows, const StepInput& in, StepOutput* out) {
    const int64_t vocab = c_.target_vocab_size;
    grow(&logits_, size_t(rows * vocab));
    proj_(y, rows, logits_.data());
    // Each row keeps its best k (the most its sentence's k can take from one row); the
    // sentence's k best are then among its rows' lists (cpu/candidates.h).
    int stride = 1;
    row_group_.clear();
    for (size_t gi = 0; gi < in.groups.size(); ++gi) {
      stride = std::max<int>(stride, int(std::min<int64_t>(in.groups[gi].k, vocab)));
      row_group_.insert(row_group_.end(), size_t(in.groups[gi].beam), int(gi));
    }
    grow(&row_scores_, size_t(rows * stride));
    grow(&row_tokens_, size_t(rows * stride));
    // Rows are independent: the log-sum-exp and the selection run on every core.
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
      const StepGroup& g = in.groups[size_t(row_group_[size_t(r)])];
      // <pad> is banned only where generate() bans it (ModelConfig::mask_pad).
      cpu::RowMasks masks{c_.mask_pad ? c_.pad_id : -1, c_.eos_id, g.mask_eos, g.force_eos, g.forced_token};
      // Repetition controls: a row with token edits takes row_topk_edited (StepInput).
      const int edits = in.edit_begin.empty() ? 0 : in.edit_begin[size_t(r) + 1] - in.edit_begin[size_t(r)];
      if (edits > 0) {
        const size_t at = size_t(in.edit_begin[size_t(r)]);
        const cpu::RowEdits row_edits{in.edit_tokens.data() + at, in.edit_factors.data() + at, edits, g.edit_logits};
        cpu::row_topk_edited(logits_.data() + r * vocab, vocab, in.running_scores[size_t(r)], masks, row_edits,
                             int(std::min<int64_t>(g.k, vocab)), row_scores_.data() + r * stride,
                             row_tokens_.data() + r * stride);
        continue;
      }
      masks.teacher_forced = g.teacher_forced;
      cpu::row_topk(logits_.data() + r * vocab, vocab, in.running_scores[size_t(r)], masks,
                    int(std::min<int64_t>(g.k, vocab)), row_scores_.data() + r * stride,
                    row_tokens_.data() + r * stride);
    }
    out->scores.clear();
    out->candidates.clear();
    int64_t first = 0;
    for (const StepGroup& g : in.groups) {
      const size_t at = out->scores.size();
      out->scores.resize(at + size_t(g.k));
      out->candidates.resize(at + size_t(g.k));
      cpu::merge_topk(row_scores_.data() + first * stride, row_tokens_.data() + first * stride, g.beam,
                      int(std::min<int64_t>(g.k, vocab)), stride, int(vocab), g.k, out->scores.data() + at,
                      out->candidates.data() + at);
      first += g.beam;
    }
    // Sampling groups' rows go to the host sampler whole (StepGroup::return_logits).
    first = 0;
    for (const StepGroup& g : in.groups) {
      if (g.return_logits) {
        const float* from = logits_.data() + first * vocab;
        out->logits.insert(out->logits.end(), from, from + int64_t(g.beam) * vocab);
      }
      first += g.beam;
    }
  }

  size_t step_buffer_bytes() const {
    size_t floats = 0;
    for (const auto& v : scratch_) floats += v.capacity();
    for (const auto& v : row_scratch_) floats += 2 * v.capacity();  // doubles
    for (const auto* v : {&encoder_out_, &hidden_, &ffn_out_, &logits_, &y_, &q_, &qkv_, &ctx_, &tmp_, &normed_,
                          &row_scores_})
      floats += v->capacity();
    return floats * sizeof(float) + row_tokens_.capacity() * sizeof(int);
  }

  size_t host_memory_used() const override {
    size_t floats = 0;
    // the concatenated Q/K/V and cross K/V weights (copies of the checkpoint's)
    for (const EncoderLayer& L : encoder_) floats += L.self_attn.qkv.storage->capacity();
    for (const DecoderLayer& L : decoder_)
      floats += L.self_attn.qkv.storage->capacity() + L.cross_attn.kv.storage->capacity();
    size_t packed = 0;  // the float32 weights' packed copies, or the int8 weights
    for_each_linear(*this, [&packed](const Linear& x) {
      packed += (x.packed ? x.packed->bytes() : 0) + (x.int8 ? x.int8->bytes() : 0);
    });
    return floats * sizeof(float) + step_buffer_bytes() + packed + kv_.bytes();
  }

  const ModelConfig c_;
  const Weights& w_;
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  Norm encoder_final_norm_, decoder_final_norm_;          // Architecture::final_*_norm
  Norm encoder_embedding_norm_, decoder_embedding_norm_;  // Architecture::embedding_norm
  float embed_scale_ = 1.f;
  Linear proj_;  // the output projection (the decoder embeddings when tied, else lm_head)

  EngineCapacity cap_;
  // last encode(), for encoder_output()
  int64_t src_len_ = 0;
  std::vector<int64_t> lengths_;
  FloatBuffer encoder_out_;                            // [sentences, src_len, d]
  KvState kv_;  // the persistent decode state: cross and self-attention keys/values in blocks
  const int threads_;
  std::vector<std::vector<float>> scratch_;       // attention scores, one per thread (encoder)
  std::vector<std::vector<double>> row_scratch_;  // attend_row's, one per thread (decoder step)
  FloatBuffer hidden_, ffn_out_, logits_;
  FloatBuffer y_, q_, qkv_, ctx_, tmp_;  // decode-step buffers
  FloatBuffer normed_;                   // a pre-norm sublayer's normalized input
  std::vector<int> row_position_, row_slot_, row_group_, enc_ids_, enc_positions_;
  std::vector<int> embed_position_;  // the decoder rows' position vectors (kZeroPosition for M2M-100's <pad>)
  FloatBuffer row_scores_;  // each row's best candidates (select_candidates)
  std::vector<int> row_tokens_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& config, const Weights& weights,
                                        size_t memory_limit, int threads, bool int8) {
  return std::make_unique<CpuEngine>(config, weights, memory_limit, threads, int8);
}

}  // namespace nmt
