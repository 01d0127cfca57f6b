#pragma once
// The device side of translation: the Transformer forward passes plus the per-step
// log-softmax and top-k over beam x vocab, over a persistent decode state that sentences
// join and leave at any step (docs/data-flow.md). The beam search bookkeeping stays on the host
// (beam_search.cc, decode_loop.cc) and drives an Engine through this interface, so the CPU
// and CUDA engines share one decoding algorithm.
//
// The persistent state's logical capacity is set by reserve() (the tables and limits); its
// memory follows use (docs/data-flow.md, "Decode-state memory"): an engine allocates a
// sentence's cross-attention keys/values as encode() admits its tokens and a cache row's
// self-attention keys/values as steps reach its positions, and returns them at release():
//   - sentence slots: a sentence's encoder output (its cross-attention keys/values) and its
//     source length live in one slot from its encode() until the loop releases the slot;
//   - cache rows: one per beam of an active sentence, holding its self-attention keys/values.
//     Row r writes its key/value at position p into cache row cache_rows[r]; positions < p
//     are those of cache row parent_rows[r] (the beam it continues). A cache row's position p
//     is written once, at the sentence's step p, so other beams of the sentence that still
//     read it never see it change; the loop gives a freed row to a new sentence only.
//     A sentence's rows are in every step from its first to its last (the CUDA engine's
//     tables of which cache row holds each position alternate with the steps).
#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace nmt {

struct EngineCapacity {
  int sentences = 0;      // sentence slots
  int rows = 0;           // KV-cache rows
  int source_tokens = 0;  // the longest source a slot holds (</s> included)
};

// One sentence to encode into a free slot.
struct EncodeItem {
  const std::vector<int>* ids = nullptr;  // unpadded, ending in </s>
  int slot = 0;
};

// One sentence of a decode step: rows [first_row, first_row + beam) of the step, in the
// order of StepInput::groups (first_row is the sum of the earlier groups' beams).
struct StepGroup {
  int slot = 0;            // its sentence slot (cross-attention)
  int position = 0;        // decoder position of its tokens (0 = decoder start token)
  int beam = 1;            // its rows
  int k = 1;               // candidates returned
  bool mask_eos = false;   // min_decoding_length not reached: EOS gets -inf
  // max length reached and the model forces EOS there (ModelConfig::forced_eos): EOS gets
  // log-prob 0, everything else -inf
  bool force_eos = false;
  // >= 0 (engines that overlap steps only): the sentence continues the beams that the step
  // submitted just before this one chose for it, where it was group `follows`: its rows'
  // tokens, parent rows and running scores are that step's, as its top-k picked them on the
  // device (continuing_beams() in beam_search.h), and StepInput's entries for them are not
  // read (but for cache_rows). So a step can be submitted before the host has collected the
  // one it follows.
  int follows = -1;
  // >= 0: this token gets log-prob 0 and every other -inf (the forced first target token,
  // DecodeOptions::forced_bos_id, at position 0), applied after the log-softmax like
  // force_eos; force_eos wins when both are set (transformers applies ForcedEOS last).
  int forced_token = -1;

  // return_alignments: the step also returns, per row of this group, the source position
  // that the alignment layer's cross-attention, averaged over its heads, weighs most
  // (StepOutput::alignments; alignment_layer()). A step where no group asks computes nothing
  // more than before.
  bool alignments = false;
  // Repetition controls (DecodeOptions; docs/decoding.md, "Repetition controls"): whether the
  // token edits of the group's rows (StepInput::edit_begin) apply to the logits, as
  // transformers' greedy search (_sample) applies its logits processors, or to the
  // log-probs, after the log-softmax, as its beam search does (true: greedy); the device's own
  // edits too (no_repeat_ngram_size below). A group with host edits never follows (one with
  // the device's may), and a forced token or EOS wins over them (the host sends none then).
  bool edit_logits = false;
  // Teacher forcing (Score, docs/decoding.md): the forced_token's candidate carries its real
  // log-prob (log_softmax of the logits, no mask) instead of 0; every other token stays -inf.
  // Read only with forced_token >= 0 and not force_eos (a forced EOS keeps 0).
  bool teacher_forced = false;

  // Sampling (model/decoding/controls/sampler.h): the engine also returns the group's rows' logits
  // (StepOutput::logits) for the host to sample from; its candidates are computed as for any
  // group (the top-k path is unchanged) and not used. Such a group never follows (its next
  // tokens are the host's draws).
  bool return_logits = false;

  // Repetition controls on the device (Engine::repetition_on_device(); docs/decoding.md,
  // "Repetition controls"): the engine keeps each of the group's rows' target history (the
  // tokens fed at positions 0..position, so the decoder start token first, as transformers'
  // decoder input_ids) and computes the rows' no_repeat_ngram_size bans and
  // repetition_penalty edits from it, as the host's TokenEdits would, applied where
  // edit_logits says. So such a group may follow. Set in every step of the sentence (the
  // history is recorded at forced steps too, where no edit applies); 0 and 1: none. The
  // group has no host edits (StepInput::edit_begin) then.
  int no_repeat_ngram_size = 0;
  float repetition_penalty = 1.f;
  bool device_repetition() const { return no_repeat_ngram_size > 0 || repetition_penalty != 1.f; }
};

struct StepInput {
  std::vector<StepGroup> groups;
  // Per row (sum of the groups' beams):
  std::vector<int> tokens;            // the token fed at the group's position
  std::vector<int> cache_rows;        // the cache row it writes at its position
  std::vector<int> parent_rows;       // the cache row holding its positions < position
  std::vector<float> running_scores;  // sum of log-probs so far, added before the top-k
  // Sentences to encode into their (free) slots while the step runs: they join at the next
  // step. On the GPU the encoder's launches then overlap the step's device work instead of
  // delaying every active sentence by an encode between two steps.
  const std::vector<EncodeItem>* encode = nullptr;

  // Repetition controls: per row, token edits applied before the top-k ranks (to the logits
  // or the log-probs: StepGroup::edit_logits). Row r's edits are entries [edit_begin[r],
  // edit_begin[r + 1]) of edit_tokens / edit_factors, each token at most once per row;
  // factor 0 bans the token (-inf), else f scores s < 0 ? s * f : s / f (transformers'
  // RepetitionPenaltyLogitsProcessor). edit_begin empty: no row has any, and the step takes
  // the engines' path without edits; else it has rows + 1 entries.
  std::vector<int> edit_begin;
  std::vector<int> edit_tokens;
  std::vector<float> edit_factors;
};

// Throws nmt::Error(kInternal) unless the step's token edits are well formed: edit_begin empty
// or rows + 1 non-decreasing offsets into edit_tokens / edit_factors (of equal size), tokens
// inside the vocabulary, factors finite and >= 0, no edits in a group that follows
// (model/decoding/controls/token_edits.cc).
void check_token_edits(const StepInput& in, size_t rows, int vocab);

// A token's score after its edit (StepInput::edit_factors), on the host as on the device.
inline float edited_score(float s, float factor) {
  if (factor == 0.f) return -__builtin_inff();
  return s < 0.f ? s * factor : s / factor;
}

struct StepOutput {
  // Per group, k entries each, concatenated in group order, best first: running score +
  // log p(token), and the candidate as row_in_group * vocab + token.
  std::vector<float> scores;
  std::vector<int> candidates;

  // When a group asks (StepGroup::alignments): per row of the step (the groups' rows in
  // order), the argmax source position of the alignment layer's head-averaged
  // cross-attention probabilities (the first of equal maxima, as torch.argmax); -1 in the
  // rows of groups that do not ask. Empty when no group asks.
  std::vector<int> alignments;

  // Per group with return_logits, in group order, beam x vocab each: the output projection
  // plus final_logits_bias, float32, before any mask (the host applies them: sampler.h).
  std::vector<float> logits;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Sizes the persistent state's logical capacity (slots, rows, source length: tables and
  // validation); the memory of the keys/values comes on demand, as sentences are encoded and
  // stepped, and goes at release(). Only grows; a growth forgets every active sentence, so
  // the caller reserves before the first encode. Throws nmt::Error(kResourceExhausted) when
  // the memory limit is hit (the engine stays usable at its previous capacity).
  virtual void reserve(const EngineCapacity& capacity) = 0;
  // The sentence in `slot` with cache rows `rows` is gone: the engine returns the memory they
  // hold (its encoder output, its rows' keys/values), and the next encode() into the slot or
  // step writing the rows starts them afresh. The decode loop calls it once per sentence that
  // it admitted, after every step that reads or writes them was collected (DecodeLoop::
  // release), and before it hands them to another sentence. A slot or rows holding nothing
  // (a sentence never encoded) is no error. Does not throw. The default: an engine whose
  // memory does not follow use.
  virtual void release(int slot, const std::vector<int>& rows) {
    (void)slot;
    (void)rows;
  }
  // An engine may keep memory past its use for memory_retention() (batches that follow one
  // another find theirs), giving it back at a release() once it has been so that long. A
  // caller that goes idle, and so releases nothing more, calls trim_idle_memory() once that
  // time has passed: what its last sentences left goes back too. Nothing enqueued may still
  // run (every step collected). Does not throw. The defaults: nothing kept.
  virtual std::chrono::milliseconds memory_retention() const { return std::chrono::milliseconds(0); }
  virtual void trim_idle_memory() {}
  virtual EngineCapacity capacity() const = 0;
  // Encodes the sentences (one batched pass) into their slots.
  virtual void encode(const std::vector<EncodeItem>& items) = 0;
  // One decoder step over the given rows (no groups: only the encode, if any).
  virtual void step(const StepInput& in, StepOutput* out) = 0;
  // The same step in two halves, so that the host can work while a device computes it:
  // submit() checks the input and enqueues the step (and its encode), collect() waits for
  // it and returns its candidates. There are kStepLanes lanes (their buffers), at most one
  // step in flight in each; the steps run in the order submitted, and a step may follow the
  // one submitted just before it (StepGroup::follows), in flight or not. Input errors (and a
  // cache growth out of memory) throw from submit(), before anything is enqueued; device
  // errors from collect(). An engine that computes on the calling thread keeps these
  // defaults (submit() computes the step), overlaps_steps() false, and never gets a step
  // that follows: its decode loop collects at once.
  static constexpr int kStepLanes = 2;
  virtual void submit(const StepInput& in, int lane) { step(in, &submitted_[lane]); }
  virtual void collect(int lane, StepOutput* out) { std::swap(*out, submitted_[lane]); }
  virtual bool overlaps_steps() const { return false; }
  // Whether the engine computes no_repeat_ngram_size and repetition_penalty itself
  // (StepGroup::no_repeat_ngram_size): then a sentence with only those controls steps like
  // one without (it follows). An engine that does not refuses a group that sets them.
  virtual bool repetition_on_device() const { return false; }
  virtual int vocab_size() const = 0;  // the target vocabulary, which candidates index
  // The encoder's float32 output of sentence i of the last encode(), [length, d_model]: for
  // tests and layer-by-layer debugging against the reference implementation.
  virtual std::vector<float> encoder_output(size_t sentence) const = 0;
  // Bytes of device memory held now (0 on the CPU).
  virtual size_t memory_used() const { return 0; }
  // Bytes of host memory held by the engine's own buffers now (decode state and step
  // buffers; not the Weights it reads from): it grows with the tokens in flight and shrinks
  // as release() returns them. 0 on the GPU, whose state lives in memory_used().
  virtual size_t host_memory_used() const { return 0; }
  // Positions the decoder's caches hold now: a step with a sentence at this position or
  // beyond first grows them (doubling), and only that growth can run out of memory before
  // the step changes anything. 0 when the engine does not say.
  virtual int cache_positions() const { return 0; }

 private:
  StepOutput submitted_[kStepLanes];  // the defaults' results, until collected
};

// The candidates a sentence asks the top-k for: 1 for greedy search, 2 x beam otherwise
// (so that `beam` of them go on even when the best `beam` all end in EOS).
// The decoder layer whose cross-attention gives the alignments: the penultimate one (the
// last of a one-layer decoder). Garg et al. 2019 ("Jointly Learning to Align and Translate
// with Transformer Models") found its attention, averaged over the heads, the best aligned
// of an unsupervised Transformer's layers (docs/decoding.md, "Alignments").
inline int alignment_layer(int decoder_layers) { return decoder_layers >= 2 ? decoder_layers - 2 : 0; }

inline int topk_for_beam(int beam) { return beam == 1 ? 1 : 2 * beam; }

}  // namespace nmt
