// The CUDA engine's decode step: the checks of its input, the packed upload, everything it
// enqueues (one graph per StepShape, lane and parity: the beam reorder + embedding, the
// decoder layers, the logits and one top-k launch per run) and the download of its
// candidates.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/topk.h"
#include "model/cuda/cuda_engine_class.h"
#include "model/error.h"

namespace nmt::cuda {

// kInvalidArgument as the CPU engine (positions past the model, k, token ids), kInternal for
// inputs the decode loop never gives (row counts, slots and cache rows out of range, one
// cache row written twice).
template <typename T>
void CudaEngine<T>::check_step(const StepInput& in) const {
  size_t rows = 0;
  for (const StepGroup& g : in.groups) {
    if (g.position >= c_.max_positions)
      throw Error(ErrorCode::kInvalidArgument,
                  "decoding past the model's " + std::to_string(c_.max_positions) + " positions");
    if (g.beam < 1 || g.position < 0 || g.slot < 0 || g.slot >= cap_.sentences)
      throw Error(ErrorCode::kInternal, "CUDA engine step: a sentence's beam, position or slot is out of range");
    if (g.k < 1 || g.k > kMaxTopk || int64_t(g.k) > int64_t(g.beam) * c_.target_vocab_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "CUDA engine: k = " + std::to_string(g.k) + " candidates per sentence is not supported");
    if (g.forced_token >= c_.target_vocab_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "forced token id " + std::to_string(g.forced_token) + " is outside the target vocabulary");
    rows += size_t(g.beam);
  }
  check_token_edits(in, rows, c_.target_vocab_size);  // repetition controls
  if (in.tokens.size() != rows || in.cache_rows.size() != rows || in.parent_rows.size() != rows ||
      in.running_scores.size() != rows)
    throw Error(ErrorCode::kInternal, "CUDA engine step: per-row inputs do not match the sentences' beams");
  for (const StepGroup& g : in.groups) {
    if (g.follows < 0) continue;
    if (size_t(g.follows) >= last_step_rows_.size() || last_step_beams_[size_t(g.follows)] != g.beam ||
        g.position < 1)
      throw Error(ErrorCode::kInternal,
                  "CUDA engine step: a sentence follows no sentence of its beam in the step before");
  }
  std::vector<char> written(size_t(cap_.rows), 0);
  auto in_range = [&](int row) { return row >= 0 && row < cap_.rows; };
  size_t r = 0;
  for (const StepGroup& g : in.groups) {
    for (int b = 0; b < g.beam; ++b, ++r) {
      const int c = in.cache_rows[r];
      // a parent is read from position 1 on
      if (!in_range(c) || written[size_t(c)]++ || (g.position > 0 && !in_range(in.parent_rows[r])))
        throw Error(ErrorCode::kInternal, "CUDA engine step: cache row out of range or written twice");
      if (in.tokens[r] < 0 || in.tokens[r] >= c_.target_vocab_size)
        throw Error(ErrorCode::kInvalidArgument, "token id outside the vocabulary");
    }
  }
}

// The packed upload of a step into the pinned buffer: the real sentences of each run, then
// its padding sentences. Each real row's position gets its cache token here (cache_token()
// may take a block, and throw out of memory before anything is enqueued).
template <typename T>
void CudaEngine<T>::fill_upload(const StepInput& in, const StepShape& shape, StepLane& lane) {
  const StepUpload h(lane.in.get(), shape.rows, shape.sentences, shape.edits);
  size_t group = 0, row = 0;  // next real sentence and row of `in`
  for (const Run& run : shape.runs) {
    int r = run.first_row;
    for (int s = 0; s < run.padded; ++s) {
      const bool real = s < run.sentences;
      const StepGroup* g = real ? &in.groups[group++] : nullptr;
      const int sentence = run.first_sentence + s;
      h.flags[sentence] = real ? (g->mask_eos ? kernels::kTopkMaskEos : 0) |
                                     (g->force_eos ? kernels::kTopkForceEos : 0) |
                                     (g->forced_token >= 0 ? kernels::kTopkForceToken : 0) |
                                     (g->forced_token >= 0 && g->teacher_forced ? kernels::kTopkTeacherForced : 0)
                               : 0;
      h.forced[sentence] = real ? g->forced_token : -1;
      if (shape.edits) {  // repetition controls: the device's (0 and 1: none) and the flags
        h.ngram[sentence] = real ? g->no_repeat_ngram_size : 0;
        h.penalty[sentence] = real ? g->repetition_penalty : 1.f;
        const bool host = real && host_edited(in, row, *g);
        if (real && (host || device_edited(*g)))
          h.flags[sentence] |= kernels::kTopkLogProbs | (g->edit_logits ? kernels::kTopkEditLogits : 0) |
                               (host ? kernels::kTopkHostEdits : 0);
      }
      for (int b = 0; b < run.beam; ++b, ++r) {
        h.tokens[r] = real ? in.tokens[row] : c_.pad_id;
        h.cache_rows[r] = real ? in.cache_rows[row] : scratch_row();
        // position 0 reads no history: its parent row is never read
        h.parents[r] = real && g->position > 0 ? in.parent_rows[row] : h.cache_rows[r];
        h.positions[r] = real ? g->position : 0;
        h.slots[r] = real ? g->slot : empty_slot();
        h.writes[r] = real ? cache_token(h.cache_rows[r], g->position) : 0;
        h.follow[r] = real && g->follows >= 0 ? last_step_rows_[size_t(g->follows)] + b : -1;
        h.running[r] = real ? in.running_scores[row] : 0.f;
        if (shape.alignments) static_cast<unsigned char*>(lane.alignment.get())[r] = real && g->alignments;
        row += real;
      }
    }
  }
  if (shape.edits && !in.edit_begin.empty()) fill_edits(in, shape, lane);
}

// Repetition controls: whether the sentence g, whose first row of `in` is `row`, has host
// edits at this step (for any of its rows), and whether it has the device's: where no token
// is forced (a forced token wins over them; its history is still recorded). Either makes all
// its rows final log-probs on the device.
template <typename T>
bool CudaEngine<T>::host_edited(const StepInput& in, size_t row, const StepGroup& g) {
  return !in.edit_begin.empty() && in.edit_begin[row + size_t(g.beam)] > in.edit_begin[row];
}
template <typename T>
bool CudaEngine<T>::device_edited(const StepGroup& g) {
  return g.device_repetition() && g.forced_token < 0 && !g.force_eos;
}

// The step's host token edits in the lane's pinned arrays, offsets per padded row (padding
// rows none), and the table the graph reads pointing at them (for sentences flagged
// kTopkHostEdits only).
template <typename T>
void CudaEngine<T>::fill_edits(const StepInput& in, const StepShape& shape, StepLane& lane) {
  const size_t edits = in.edit_tokens.size(), rows = size_t(shape.rows);
  lane.edit_data.reserve((rows + 1) * sizeof(int) + edits * (sizeof(int) + sizeof(float)));
  int* begin = static_cast<int*>(lane.edit_data.get());
  int* tokens = begin + rows + 1;
  float* factors = reinterpret_cast<float*>(tokens + edits);
  std::copy(in.edit_tokens.begin(), in.edit_tokens.end(), tokens);
  std::copy(in.edit_factors.begin(), in.edit_factors.end(), factors);
  size_t row = 0;  // of `in`
  for (const Run& run : shape.runs) {
    int r = run.first_row;
    for (int s = 0; s < run.padded; ++s) {
      const bool real = s < run.sentences;
      for (int b = 0; b < run.beam; ++b, ++r) {
        begin[r] = in.edit_begin[row];  // a padding row: the next real one's, so none
        row += real;
      }
    }
  }
  begin[shape.rows] = int(edits);
  auto* table = static_cast<kernels::TokenEditTable*>(lane.edit_table.get());
  table->begin = begin;
  table->tokens = tokens;
  table->factors = factors;
}

// Everything a step enqueues (its graph): from reading the packed upload to writing the
// top-k candidates, both in the lane's pinned buffers.
template <typename T>
void CudaEngine<T>::enqueue_step(const StepShape& shape, const StepLane& lane) {
  const int rows = shape.rows;
  const int parity = parity_;
  // No copies on the stream: the first launch reads the upload where the host wrote it (the
  // lane's pinned buffer, mapped) and copies it to step_in for the later kernels, and the
  // top-k writes its candidates straight into the lane's pinned download buffer. Each copy
  // was a graph node of its own between the host and the kernels: end-to-end run 38 measured
  // the two at ~8 us of a Transformer-base batch-1 step (H100).
  kernels::StepUploadCopy upload;
  upload.src = lane.in.get();
  upload.dst = state_.step_in.get();
  upload.bytes = int64_t(StepUpload::bytes(rows, shape.sentences, shape.edits));
  const StepUpload dev(state_.step_in.get(), rows, shape.sentences, shape.edits),
      host(lane.in.get(), rows, shape.sentences, shape.edits);
  Residual<T> x{{state_.y[0].get(), state_.y[1].get()}};
  // Beam reorder (only the small table of which cache row holds each position moves) and
  // the tokens' embeddings, in one launch.
  kernels::RowEmbedding<T> embed;
  embed.ids = host.tokens; embed.embeddings = w_.decoder_embeddings; embed.positions_table = w_.decoder_positions;
  embed.out = x.current; embed.d_model = d_; embed.scale = embed_scale_;
  embed.q = w_.decoder_embeddings_q; embed.q_scale = w_.decoder_embeddings_scale;
  if (c_.arch.pad_position_zero) embed.zero_position_token = c_.pad_id;
  // Rows that follow the step before take their tokens, parents and running scores from
  // its next rows (the other parity's); every row's running score goes to state_.running.
  const NextRowBuffers& before = state_.next_rows[parity];
  kernels::StepFollow follow;
  follow.rows = host.follow;
  follow.tokens = before.tokens.get(); follow.parents = before.parents.get(); follow.running = before.running.get();
  follow.running_in = host.running; follow.running_out = state_.running.get();
  kernels::beam_reorder_and_embed_cuda<T>(state_.key_rows[parity].get(), state_.key_rows[1 - parity].get(),
                                          host.parents, rows, cache_cap_, host.positions, host.cache_rows, embed,
                                          q_.stream, upload, follow, host.writes);
  if (c_.arch.embedding_norm) layers_.normalize(x, w_.decoder_embedding_norm, rows);
  aligning_ = shape.alignments ? &lane : nullptr;
  for (int l = 0; l < c_.decoder_layers; ++l) enqueue_decoder_layer(l, x, dev, rows, parity);
  aligning_ = nullptr;
  if (c_.arch.final_decoder_norm) layers_.final_norm(x, w_.decoder_final_norm, rows);
  layers_.project_logits(x, w_.output_projection, state_.logits.get(), logits_ld(), rows);
  if (shape.edits) {  // repetition controls: the edited sentences' rows become final log-probs
    // The device controls' histories: this step's key-row table (just reordered) and tokens.
    kernels::DeviceHistory history;
    history.tokens = state_.history.get();
    history.key_rows = state_.key_rows[1 - parity].get();
    history.capacity = cache_cap_;
    history.cache_rows = dev.cache_rows; history.positions = dev.positions;
    history.step_tokens = dev.tokens; history.follow = dev.follow; history.follow_tokens = before.tokens.get();
    for (const Run& run : shape.runs) {
      history.ngram = dev.ngram + run.first_sentence;  // the upload's device copy, not pinned
      history.penalty = dev.penalty + run.first_sentence;
      kernels::beam_token_edits_cuda(state_.logits.get() + int64_t(run.first_row) * logits_ld(), logits_ld(),
                                     w_.output_bias.get(), run.padded, run.beam, c_.target_vocab_size,
                                     dev.flags + run.first_sentence,
                                     static_cast<const kernels::TokenEditTable*>(lane.edit_table.get()),
                                     run.first_row, q_.stream, &history, cache_cap_);
    }
  }
  enqueue_topk(shape, dev, static_cast<int*>(lane.out.get()), state_.next_rows[1 - parity]);
}

// Decoder layer l over the step's rows: self-attention over the KV cache (appending this
// position), cross-attention over the slots' encoder K/V, the feed-forward block.
template <typename T>
void CudaEngine<T>::enqueue_decoder_layer(int l, Residual<T>& x, const StepUpload& dev, int rows, int parity) {
  const DecoderLayer<T>& L = w_.decoder[size_t(l)];
  const int d = d_, hd = d_ / c_.decoder_heads;
  const bool qkv_ours = layers_.sublayer_input(x, L.qkv, state_.qkv.get(), rows, L.self_norm, state_.ctx.get());
  kernels::DecoderSelfAttentionArgs<T> self;
  self.qkv = state_.qkv.get(); self.bias = L.qkv.b;
  self.k_cache = cache(l, 0); self.v_cache = cache(l, 1);
  self.key_rows = state_.key_rows[1 - parity].get();  // the table just reordered
  self.positions = dev.positions; self.cache_rows = dev.cache_rows;
  self.out = state_.ctx.get();
  self.rows = rows; self.capacity = cache_cap_; self.heads = c_.decoder_heads; self.head_dim = hd;
  self.token_stride = kv_cols();
  self.scale = 1.f / std::sqrt(float(hd));
  // Settled: the reorder wrote the key-row table two launches ago in layer 0 (three with an
  // embedding LayerNorm, also ours), where that needs the launch between to be ours (a cuBLAS
  // kernel might let this one start before waiting for the reorder), and many launches ago in
  // the later layers.
  self.history_settled = l > 0 || qkv_ours;
  kernels::decoder_self_attention_cuda(self, q_.stream);
  layers_.linear(state_.ctx.get(), L.out, state_.tmp.get(), rows);
  layers_.sublayer_output(x, state_.tmp.get(), L.out.b, L.self_norm);

  // the query into qkv's first columns
  layers_.sublayer_input(x, L.cross_q, state_.qkv.get(), rows, L.cross_norm, state_.ctx.get());
  kernels::AttentionArgs<T> cross;
  cross.q = state_.qkv.get(); cross.q_bias = L.cross_q.b;
  cross.q_batch_stride = cross.q_row_stride = d;
  cross.k = reinterpret_cast<const T*>(state_.cross_kv.get()) + int64_t(l) * 2 * d; cross.v = cross.k + d;
  cross.kv_row_stride = kv_cols();
  cross.v_bias = L.cross_v_bias;
  cross.kv_index = dev.slots; cross.key_lengths = state_.slot_table.get();
  cross.kv_starts = state_.slot_table.get() + cap_.sentences + 1;
  cross.out = state_.ctx.get(); cross.out_batch_stride = cross.out_row_stride = d;
  cross.batch = rows; cross.q_len = 1; cross.heads = c_.decoder_heads; cross.head_dim = hd;
  cross.kv_len = cap_.source_tokens; cross.scale = self.scale;
  cross.kv_settled = true;  // written by the encode, behind an earlier step
  kernels::attention_cuda(cross, q_.stream);
  if (aligning_ && l == alignment_layer(c_.decoder_layers)) {  // return_alignments, into the lane's pinned buffer
    auto* flags = static_cast<unsigned char*>(aligning_->alignment.get());
    kernels::attention_argmax_cuda(cross, flags,
                                   reinterpret_cast<int*>(flags + alignment_argmax_offset(rows)), q_.stream);
  }
  layers_.linear(state_.ctx.get(), L.cross_out, state_.tmp.get(), rows);
  layers_.sublayer_output(x, state_.tmp.get(), L.cross_out.b, L.cross_norm);

  layers_.feed_forward(x, L.fc1, L.fc2, L.ffn_norm, state_.hidden.get(), state_.tmp.get(), state_.ctx.get(), rows);
}

// One top-k launch per run, on its rows, with its sentences' flags and forced tokens; `out`
// takes the scores (float), then the candidates, and `next` the rows each sentence goes on
// with.
template <typename T>
void CudaEngine<T>::enqueue_topk(const StepShape& shape, const StepUpload& dev, int* out, const NextRowBuffers& next) {
  float* scores = reinterpret_cast<float*>(out);
  int* index = out + shape.outputs;
  kernels::TopkMasks masks;
  masks.pad_id = c_.mask_pad ? c_.pad_id : -1;
  masks.eos_id = c_.eos_id;
  for (const Run& run : shape.runs) {
    masks.sentence_flags = dev.flags + run.first_sentence;
    masks.forced_tokens = dev.forced + run.first_sentence;
    kernels::NextRows rows;
    rows.cache_rows = dev.cache_rows + run.first_row;
    rows.tokens = next.tokens.get() + run.first_row;
    rows.parents = next.parents.get() + run.first_row;
    rows.running = next.running.get() + run.first_row;
    kernels::beam_topk_cuda<float>(state_.logits.get() + int64_t(run.first_row) * logits_ld(), w_.output_bias.get(),
                                   state_.running.get() + run.first_row, run.padded, run.beam,
                                   c_.target_vocab_size, run.k, masks, scores + run.first_output,
                                   index + run.first_output, state_.topk_ws.get(), state_.topk_bytes[size_t(shape.rows)], q_.stream,
                                   logits_ld(), &rows);
  }
}

template <typename T>
StepLane& CudaEngine<T>::step_lane(int lane) {
  if (lane < 0 || lane >= kStepLanes)
    throw Error(ErrorCode::kInternal, "CUDA engine: no step lane " + std::to_string(lane));
  return lanes_[lane];
}

// A lane's graphs copy from and to its own pinned buffers; a parity's read and write its
// key-row tables and next-row buffers.
template <typename T>
GraphKey CudaEngine<T>::graph_key(const StepShape& shape, int lane) const {
  GraphKey key{lane, parity_};
  for (const Run& r : shape.runs) key.insert(key.end(), {r.beam, r.k, r.padded});
  if (shape.alignments) key.push_back(-1);  // return_alignments' graph: the argmax kernel too
  if (shape.edits) key.push_back(-1);  // repetition controls: the token edits' launches
  return key;
}

// The step on the stream, then the other parity's key-row table and next rows are current.
// The first padded row and the beam of each of its sentences stay for the next step to follow.
template <typename T>
void CudaEngine<T>::launch_step(const StepShape& shape, const std::vector<StepGroup>& groups, int lane) {
  StepLane& l = lanes_[lane];
  launch(step_graphs_, graph_key(shape, lane), use_graphs_, q_, capture_stream_, [&] { enqueue_step(shape, l); });
  parity_ = 1 - parity_;
  last_step_rows_.clear();
  last_step_beams_.clear();
  size_t g = 0;
  for (const Run& run : shape.runs) {
    for (int s = 0; s < run.sentences; ++s, ++g) {
      last_step_rows_.push_back(run.first_row + s * run.beam);
      last_step_beams_.push_back(groups[g].beam);
    }
  }
}

// The real sentences' k best of the downloaded step output, in group order.
template <typename T>
void CudaEngine<T>::collect_output(const StepShape& shape, const StepLane& lane, StepOutput* out) const {
  const float* scores = static_cast<const float*>(lane.out.get());
  const int* index = static_cast<const int*>(lane.out.get()) + shape.outputs;
  for (const Run& run : shape.runs) {
    const size_t first = size_t(run.first_output), n = size_t(run.sentences) * run.k;
    out->scores.insert(out->scores.end(), scores + first, scores + first + n);
    out->candidates.insert(out->candidates.end(), index + first, index + first + n);
  }
  if (!shape.alignments) return;
  // return_alignments: the real rows', in group order (-1 for those of sentences not asking).
  const auto* flags = static_cast<const unsigned char*>(lane.alignment.get());
  const int* argmax = reinterpret_cast<const int*>(flags + alignment_argmax_offset(shape.rows));
  for (const Run& run : shape.runs)
    out->alignments.insert(out->alignments.end(), argmax + run.first_row, argmax + run.first_row + run.sentences * run.beam);
}

// Each sampling group's rows are consecutive on the device (its run's first row + its place
// in the run x beam); one 2-D copy per group drops the logits' row padding (logits_ld()).
template <typename T>
void CudaEngine<T>::enqueue_logits_download(const StepInput& in, const StepShape& shape, StepLane& lane) {
  const size_t vocab = size_t(c_.target_vocab_size);
  lane.logits_floats = 0;
  for (const StepGroup& g : in.groups) lane.logits_floats += g.return_logits ? size_t(g.beam) * vocab : 0;
  if (lane.logits_floats == 0) return;
  lane.logits.reserve(lane.logits_floats * sizeof(float));  // the lane's last step was waited for
  float* host = static_cast<float*>(lane.logits.get());
  size_t group = 0;
  for (const Run& run : shape.runs) {
    for (int s = 0; s < run.sentences; ++s, ++group) {
      const StepGroup& g = in.groups[group];
      if (!g.return_logits) continue;
      const float* rows = state_.logits.get() + int64_t(run.first_row + s * run.beam) * logits_ld();
      check_cuda(cudaMemcpy2DAsync(host, vocab * sizeof(float), rows, size_t(logits_ld()) * sizeof(float),
                                   vocab * sizeof(float), size_t(g.beam), cudaMemcpyDeviceToHost, q_.stream),
                 "sampling logits download");
      host += size_t(g.beam) * vocab;
    }
  }
}

template <typename T>
void CudaEngine<T>::collect_logits(const StepLane& lane, StepOutput* out) const {
  if (lane.logits_floats == 0) return;
  const float* host = static_cast<const float*>(lane.logits.get());
  out->logits.assign(host, host + lane.logits_floats);
  if (output_bias_host_.empty()) return;
  const size_t vocab = output_bias_host_.size();
  for (size_t i = 0; i < out->logits.size(); ++i) out->logits[i] += output_bias_host_[i % vocab];
}

#define NMT_DECODER_STEP(T)                                                                                   \
  template void CudaEngine<T>::check_step(const StepInput&) const;                                            \
  template void CudaEngine<T>::fill_upload(const StepInput&, const StepShape&, StepLane&);                    \
  template void CudaEngine<T>::enqueue_step(const StepShape&, const StepLane&);                               \
  template void CudaEngine<T>::enqueue_decoder_layer(int, Residual<T>&, const StepUpload&, int, int);         \
  template void CudaEngine<T>::enqueue_topk(const StepShape&, const StepUpload&, int*, const NextRowBuffers&); \
  template StepLane& CudaEngine<T>::step_lane(int);                                                           \
  template GraphKey CudaEngine<T>::graph_key(const StepShape&, int) const;                                    \
  template void CudaEngine<T>::launch_step(const StepShape&, const std::vector<StepGroup>&, int);             \
  template bool CudaEngine<T>::host_edited(const StepInput&, size_t, const StepGroup&);                       \
  template bool CudaEngine<T>::device_edited(const StepGroup&);                                               \
  template void CudaEngine<T>::fill_edits(const StepInput&, const StepShape&, StepLane&);                     \
  template void CudaEngine<T>::collect_output(const StepShape&, const StepLane&, StepOutput*) const;         \
  template void CudaEngine<T>::enqueue_logits_download(const StepInput&, const StepShape&, StepLane&);       \
  template void CudaEngine<T>::collect_logits(const StepLane&, StepOutput*) const;
NMT_DECODER_STEP(float)
NMT_DECODER_STEP(__half)
#undef NMT_DECODER_STEP

}  // namespace nmt::cuda
