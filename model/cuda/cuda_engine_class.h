#pragma once
// The CUDA engine: docs/models.md on the GPU in float16 or float32 (T), cuBLAS for the dense
// projections of more than kernels::small_gemm_max_rows<T>() rows and kernels::small_gemm_cuda
// for fewer (float32 accumulation either way), the kernels of kernels/ for everything else
// (embedding, attention, LayerNorm with the residual and bias fused, bias + activation, beam
// top-k). At few rows a sublayer's LayerNorm runs in the next projection's small GEMM
// (layers.h). The family's layer order and extra norms (Architecture) are chosen where the
// work is enqueued, once per captured graph: a Marian step runs the same launches as before
// the families.
//
// Persistent decode state (reserve(), model/decoding/engine.h): sentence slots holding the
// cross-attention K/V of every decoder layer and the source length, KV-cache rows, and the
// step buffers (decode_state.h). Sentences join and leave at any step: every row of a step
// carries its own position, cache row, parent cache row and slot. The K/V live in pools that
// follow use (docs/data-flow.md, "Decode-state memory"): a slot takes a range of source tokens
// at its encode, a cache row a block of kBlockPositions tokens as its positions reach it, both
// lowest first, and release() gives them back; the pools and the step buffers keep their
// addresses as they are backed and given back (DevicePool), so the graphs stay valid.
//
// Decode steps (decoder_step.cu): one packed upload in pinned host memory (StepUpload: per
// row token, cache row, parent cache row, position, slot, the row of the step before it
// follows or -1, the cache token it writes, running score; per sentence its forced token and
// top-k flags) that the
// step's first launch reads and copies to device memory, the forward pass, log-softmax +
// top-k on the device, the candidates written straight into pinned host memory and the rows
// each sentence goes on with (kernels::NextRows) into device memory, where the next step's
// rows that follow this one read their tokens, parents and running scores
// (StepGroup::follows: the host submits that step before collecting this one). The later
// kernels read the upload from device memory (the optional device pointers of kernels/), so
// the whole step is captured once as a CUDA graph per shape and replayed. A step's shape
// (step_layout.h): its sentences form runs of equal (beam, k) (one top-k launch each), each
// run padded to bucket(sentences) with padding sentences whose rows write a scratch cache row
// and whose results are dropped; the graph key is the runs' (beam, k, padded sentences), the
// lane (its pinned buffers) and the parity of the key-row tables and next-row buffers (every
// step flips it). Buffers the graphs use only change in reserve() and when the key-row
// tables grow, which drop the graphs. The beam reorder moves only the key-row table, which
// names the cache token of each position (kernels::beam_reorder_and_embed_cuda), never the
// KV caches.
//
// Encodes (encoder.cu): one packed upload (ids, positions, lengths, the slots' source lengths
// and the pointer arrays of the cross K/V GEMM that writes each sentence's K/V into its slot),
// the encoder over persistent buffers, so an encode of n sentences padded to S tokens (S
// rounded up to kEncodeLengthStep) is a graph per (n, S) too: an admission costs the host one
// graph launch instead of ~10 launches per layer.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "kernels/topk.h"
#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cuda/decode_state.h"
#include "model/cuda/device/device_memory.h"
#include "model/cuda/device/graph_cache.h"
#include "model/cuda/device_weights.h"
#include "model/cuda/layers.h"
#include "model/cuda/step_layout.h"
#include "model/decoding/engine.h"
#include "model/translator.h"

namespace nmt::cuda {

constexpr int kMaxTopk = kernels::kMaxBeamTopk;

// NMT_CUDA_PROFILE=1: the engine measures its decode steps (GPU time between the step's first
// and last operation, host time in its submit() and collect()) and prints the averages when
// destroyed. With several engines on the device, another engine's work enqueued between the
// two on the shared stream counts too: profile one loop.
struct StepProfile {
  long steps = 0, encodes = 0;
  double gpu_ms = 0, step_wall_ms = 0, encode_wall_ms = 0;
};

template <typename T>
class CudaEngine final : public Engine {
 public:
  CudaEngine(const ModelConfig& c, const Weights& w, const TranslatorOptions& o);
  ~CudaEngine() override;

  int vocab_size() const override { return c_.target_vocab_size; }
  size_t memory_used() const override { return alloc_.held(); }  // pools' backed bytes included
  std::chrono::milliseconds memory_retention() const override { return kRetain; }
  void trim_idle_memory() override;
  int cache_positions() const override { return cache_cap_; }
  EngineCapacity capacity() const override { return cap_; }
  std::vector<float> encoder_output(size_t sentence) const override;

  void reserve(const EngineCapacity& capacity) override;
  void release(int slot, const std::vector<int>& rows) override;
  void encode(const std::vector<EncodeItem>& items) override;
  void step(const StepInput& in, StepOutput* out) override;
  void submit(const StepInput& in, int lane) override;
  void collect(int lane, StepOutput* out) override;
  bool overlaps_steps() const override { return true; }
  // no_repeat_ngram_size and repetition_penalty from the rows' histories on the device
  // (kernels::DeviceHistory, beam_token_edits_cuda): such sentences follow like plain ones.
  bool repetition_on_device() const override { return true; }

 private:
  static constexpr size_t kCublasWorkspace = 8u << 20;

  // ---- setup and teardown (cuda_engine.cu)
  void init(const Weights& w);
  void warm_up();
  void release_handles();
  // Waits for this engine's work on the shared stream, not for the other engines' work
  // enqueued after it, and for its last encode.
  cudaError_t finish() const noexcept;
  void wait(const char* what = "synchronize") const;

  // ---- persistent state (decode_state.cu)
  // Cache rows hold one beam each; cache row cap_.rows, past the caller's, is the padding
  // rows' scratch row (they all write and read its position 0 only, cache token 0; their
  // results are dropped). Slot cap_.sentences, past the caller's, is theirs too: no keys.
  int scratch_row() const { return cap_.rows; }
  int empty_slot() const { return cap_.sentences; }
  // K (kv 0) or V (kv 1) of decoder layer `layer` of cache token 0: a token holds every
  // layer's, kv_cols() elements, as a source token's cross-attention K/V do.
  T* cache(int layer, int kv) const {
    return reinterpret_cast<T*>(state_.cache.get()) + (int64_t(layer) * 2 + kv) * d_;
  }
  int kv_cols() const { return 2 * c_.decoder_layers * d_; }
  // Memory past use goes back after this long (DevicePool::trim): batches that follow one
  // another keep theirs.
  static constexpr std::chrono::milliseconds kRetain{1000};
  // Row stride of the logits and rows of the output projection: the vocabulary rounded up to
  // 8, so that the GEMM's output dimension and rows are 16-byte aligned (with an odd
  // vocabulary cuBLAS falls back to an unaligned sm75 kernel: on H100 23 us for
  // 256 x 8001 x 256, 243 us for 256 x 58101 x 512). The padding columns are never read.
  int logits_ld() const { return (c_.target_vocab_size + 7) / 8 * 8; }
  void allocate_state(const EngineCapacity& cap);
  void drop_graphs(GraphCache& cache);
  void drop_graphs();
  void grow_cache(int positions);
  void grow_step_buffers(int rows);
  int cache_token(int row, int position);  // takes the row's blocks up to the position
  T* take_source_tokens(int slot, int tokens);  // the slot's K/V, [tokens][kv_cols()]
  void free_source_tokens(int slot);
  void trim_memory();
  void reserve_encode(int n, int rows);

  // ---- encode (encoder.cu)
  void check_sources(const std::vector<EncodeItem>& items) const;
  // encode() without the profile's synchronize: the encode on encode_q_, after the work
  // before_encode_ marks on the shared stream (which the caller records).
  void enqueue_encode(const std::vector<EncodeItem>& items);
  void enqueue_encoder(const EncodeUpload& host, const EncodeUpload& dev, int n, int S);
  // The shared stream waits for the last encode: its sentences step from the next step on.
  void join_encode();

  // ---- decode step (decoder_step.cu)
  void check_step(const StepInput& in) const;
  void fill_upload(const StepInput& in, const StepShape& shape, StepLane& lane);
  // Repetition controls (decoder_step.cu): the step's token edits for the device.
  static bool host_edited(const StepInput& in, size_t row, const StepGroup& g);
  static bool device_edited(const StepGroup& g);
  void fill_edits(const StepInput& in, const StepShape& shape, StepLane& lane);
  void enqueue_step(const StepShape& shape, const StepLane& lane);
  void enqueue_decoder_layer(int l, Residual<T>& x, const StepUpload& dev, int rows, int parity);
  void enqueue_topk(const StepShape& shape, const StepUpload& dev, int* out, const NextRowBuffers& next);
  StepLane& step_lane(int lane);
  GraphKey graph_key(const StepShape& shape, int lane) const;
  void launch_step(const StepShape& shape, const std::vector<StepGroup>& groups, int lane);
  void collect_output(const StepShape& shape, const StepLane& lane, StepOutput* out) const;
  // Sampling (StepGroup::return_logits): the groups' rows of the step's logits into the
  // lane's pinned buffer, after the step's graph on the stream (outside it: the graphs stay
  // those of the shape), and into StepOutput::logits with final_logits_bias at collect().
  void enqueue_logits_download(const StepInput& in, const StepShape& shape, StepLane& lane);
  void collect_logits(const StepLane& lane, StepOutput* out) const;

  const ModelConfig c_;
  const int device_;
  DeviceAllocator alloc_;  // first member with device memory: destroyed last
  const bool use_graphs_;
  DeviceQueue q_;  // where the code enqueues: the device's shared stream (device_stream())
  cudaStream_t capture_stream_ = nullptr;  // private: graph captures only
  cudaEvent_t done_ = nullptr;             // wait(): the end of this engine's work so far
  DeviceBuffer<char> workspace_;
  // 8-bit weights (TranslatorOptions::precision int8 or fp8, T __half): the queues' scratch for
  // the projections past the int8 GEMV's rows (DeviceQueue::int8_scratch); e4m3_: fp8.
  const bool int8_;
  const bool e4m3_;
  DeviceBuffer<__half> int8_scratch_, encode_int8_scratch_;
  int d_ = 0;
  float embed_scale_ = 1.f;
  Layers<T> layers_{c_, &q_};
  DeviceWeights<T> w_;

  // The encoder's buffers (the encode graphs point into them; only grow) and the last
  // encode(): its output is enc_.x[0], [items][enc_len_][d] in item order.
  EncodeBuffers<T> enc_;
  int enc_len_ = 0;
  std::vector<int> enc_lengths_;  // per encode() item
  PinnedBuffer enc_in_;
  cudaEvent_t enc_uploaded_ = nullptr;  // enc_in_ may be refilled once this has passed
  // Encodes run on a stream of their own, with a cuBLAS handle (and workspace) of their own,
  // so that a newcomers' encode overlaps the step it rides on instead of following it on the
  // shared stream: every step of a loop that admits paid for the encoder's launches after
  // its own. An encode waits for before_encode_ (the shared stream's work before the step it
  // rides on: the sentences that left at the step before may still be read there, and their
  // slots may be the newcomers'); the next step waits for encoded_ (join_encode()).
  DeviceQueue encode_q_;
  DeviceBuffer<char> encode_workspace_;
  cudaEvent_t before_encode_ = nullptr;
  cudaEvent_t encoded_ = nullptr;
  bool encode_pending_ = false;  // the shared stream has not yet waited for encoded_

  // persistent decode state (reserve(); its tables only grow, its pools follow use)
  EngineCapacity cap_;
  int cache_cap_ = 0;        // positions per key-row table row: doubles up to max_positions
  int padded_rows_cap_ = 0;  // the most rows of a step
  DecodeState<T> state_;
  std::vector<int> slot_table_;  // host mirror of state_.slot_table
  StepLane lanes_[kStepLanes];
  // Every step flips the key-row table it reorders from and the next-row buffers it follows
  // (so a sentence's rows must be in every step from its first to its last, as DecodeLoop
  // steps them); the last step's sentences, for the next one to follow (StepGroup::follows).
  int parity_ = 0;
  std::vector<int> last_step_rows_, last_step_beams_;
  // return_alignments: the lane whose step enqueue_step() is enqueuing asks for alignments
  // (its StepLane::alignment buffer), else null.
  const StepLane* aligning_ = nullptr;
  GraphCache step_graphs_, encode_graphs_;
  const bool profile_;
  StepProfile profile_stats_;
  std::vector<float> output_bias_host_;  // final_logits_bias for collect_logits (empty: zero)
};

}  // namespace nmt::cuda
