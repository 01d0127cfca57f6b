// The CUDA engine: DESIGN.md §3 on the GPU in float16 or float32 (T), cuBLAS for the dense
// projections of more than kernels::small_gemm_max_rows<T>() rows and kernels::small_gemm_cuda for fewer
// (float32 accumulation either way), the kernels of kernels/ for everything else (embedding,
// attention, LayerNorm with the residual and bias fused, bias + activation, beam top-k). At
// few rows a sublayer's LayerNorm runs in the next projection's small GEMM (Residual below).
//
// Persistent decode state (reserve(), model/engine.h): sentence slots holding the
// cross-attention K/V of every decoder layer and the source length, KV-cache rows, and the
// step buffers. Sentences join and leave at any step: every row of a step carries its own
// position, cache row, parent cache row and slot.
//
// Decode steps: one packed upload in pinned host memory (per row: token, cache row, parent
// cache row, position, slot, the row of the step before it follows or -1, running score; per
// sentence: its EOS flags) that the step's first launch reads and copies to device memory, the
// forward pass, log-softmax + top-k on the device, the candidates written straight into pinned
// host memory and the rows each sentence goes on with (kernels::NextRows) into device memory,
// where the next step's rows that follow this one read their tokens, parents and running
// scores (StepGroup::follows: the host submits that step before collecting this one). The
// later kernels read the upload from device memory (the optional device pointers of
// kernels/), so the whole step is captured once as a CUDA graph per shape and replayed. A
// step's shape: its sentences form runs of equal (beam, k) (one top-k launch each), each run
// padded to bucket(sentences) with padding sentences whose rows write a scratch cache row and
// whose results are dropped; the graph key is the runs' (beam, k, padded sentences), the lane
// (its pinned buffers) and the parity of the key-row tables and next-row buffers (every step
// flips it). Buffers the graphs use only change in reserve() and when the caches grow, which
// drop the graphs. The beam reorder moves only the key-row table
// (kernels::beam_reorder_and_embed_cuda), never the KV caches.
//
// Encodes: one packed upload (ids, positions, lengths, the slots' source lengths and the
// pointer arrays of the cross K/V GEMM that writes each sentence's K/V into its slot), the
// encoder over persistent buffers, so an encode of n sentences padded to S tokens (S rounded
// up to kEncodeLengthStep) is a graph per (n, S) too: an admission costs the host one graph
// launch instead of ~10 launches per layer.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/layer_norm.h"
#include "kernels/small_gemm.h"
#include "kernels/topk.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/device_stream.h"
#include "model/cuda_engine.h"
#include "model/error.h"

namespace nmt {
namespace cuda {
namespace {

constexpr int kMaxTopk = kernels::kMaxBeamTopk;

template <typename T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type<__half>() { return CUDA_R_16F; }

// Sentence-count buckets of the decode graphs: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (<= 33%
// padding rows, few distinct graphs).
int bucket(int n) {
  int b = 1;
  while (b < n) b = b < 4 ? b + 1 : ((b & (b - 1)) == 0 ? b / 2 * 3 : b / 3 * 4);
  return b;
}

// The most rows a step over `rows` real rows has once every run is padded to bucket()
// sentences: bucket(n) - n < n / 2, so padding adds less than half of each run's rows.
int padded_rows_bound(int rows) { return rows + rows / 2; }

// NMT_CUDA_PROFILE=1: the engine measures its decode steps (GPU time between the step's first
// and last operation, host time in its submit() and collect()) and prints the averages when
// destroyed. With several engines on the device, another engine's work enqueued between the
// two on the shared stream counts too: profile one loop.
bool profile_enabled() {
  const char* v = std::getenv("NMT_CUDA_PROFILE");
  return v && std::string(v) == "1";
}

struct StepProfile {
  long steps = 0, encodes = 0;
  double gpu_ms = 0, step_wall_ms = 0, encode_wall_ms = 0;
};

bool graphs_enabled() {
  const char* v = std::getenv("NMT_CUDA_GRAPHS");
  return !(v && std::string(v) == "0");
}

// One top-k launch of a step: consecutive sentences of equal (beam, k), padded to
// bucket(sentences). Offsets count padded rows, sentences and outputs of the whole step.
struct Run {
  int beam = 1, k = 1;
  int sentences = 0;  // real ones (StepInput groups)
  int padded = 0;     // bucket(sentences): the rest are padding
  int first_row = 0, first_sentence = 0, first_output = 0;
};

// What the device does in a step: fixes every launch and copy, so it keys the graphs.
struct StepShape {
  std::vector<Run> runs;
  int rows = 0, sentences = 0, outputs = 0;  // padded totals
};

StepShape shape_of(const std::vector<StepGroup>& groups) {
  StepShape s;
  for (const StepGroup& g : groups) {
    if (s.runs.empty() || s.runs.back().beam != g.beam || s.runs.back().k != g.k)
      s.runs.push_back(Run{g.beam, g.k});
    ++s.runs.back().sentences;
  }
  for (Run& r : s.runs) {
    r.padded = bucket(r.sentences);
    r.first_row = s.rows;
    r.first_sentence = s.sentences;
    r.first_output = s.outputs;
    s.rows += r.padded * r.beam;
    s.sentences += r.padded;
    s.outputs += r.padded * r.k;
  }
  return s;
}

// The packed per-step upload over `rows` padded rows: seven [rows] arrays of 4-byte values, then
// one top-k flag byte per padded sentence (kernels::kTopkMaskEos | kTopkForceEos).
struct StepUpload {
  int *tokens, *cache_rows, *parents, *positions, *slots, *follow;
  float* running;
  unsigned char* flags;
  StepUpload(void* base, int rows) {
    tokens = static_cast<int*>(base);
    cache_rows = tokens + rows;
    parents = cache_rows + rows;
    positions = parents + rows;
    slots = positions + rows;
    follow = slots + rows;
    running = reinterpret_cast<float*>(follow + rows);
    flags = reinterpret_cast<unsigned char*>(running + rows);
  }
  static size_t bytes(int rows, int sentences) { return 7 * sizeof(int) * size_t(rows) + sentences; }
};

// The rows each sentence of a step goes on with (kernels::NextRows), [rows] each.
struct NextRowBuffers {
  DeviceBuffer<int> tokens, parents;
  DeviceBuffer<float> running;
};

// An encode's sources are padded to a multiple of this many tokens (within the engine's
// limits): fewer distinct encode graphs, padding masked by the lengths as before.
constexpr int kEncodeLengthStep = 8;

// The packed upload of an encode of n sentences of `rows` tokens in all (each padded to the
// same length), in the order of the device buffer: ids [rows], positions [rows], lengths [n],
// then (8-byte aligned) the cross K/V GEMM's pointer arrays weight [n], input [n], output [n]
// (each sentence's slot); then, copied to the slot-length table instead, every slot's source
// length [slots].
struct EncodeUpload {
  int *ids, *positions, *lengths;
  const void **weights, **inputs;
  void** outputs;
  int* slot_lengths;
  EncodeUpload(void* base, int n, int rows) {
    ids = static_cast<int*>(base);
    positions = ids + rows;
    lengths = positions + rows;
    weights = reinterpret_cast<const void**>(static_cast<char*>(base) + ints_bytes(n, rows));
    inputs = weights + n;
    outputs = const_cast<void**>(inputs + n);  // the same pointer size: a layout, not a cast of data
    slot_lengths = reinterpret_cast<int*>(outputs + n);
  }
  static size_t ints_bytes(int n, int rows) { return (sizeof(int) * (2 * size_t(rows) + n) + 7) / 8 * 8; }
  static size_t device_bytes(int n, int rows) { return ints_bytes(n, rows) + 3 * sizeof(void*) * size_t(n); }
  static size_t bytes(int n, int rows, int slots) { return device_bytes(n, rows) + sizeof(int) * size_t(slots); }
};

// Captured graphs of one kind by key. A key's first use runs plain (lazy module loading,
// cuBLAS heuristics); it is captured the next time.
using GraphKey = std::vector<int>;
struct GraphCache {
  std::map<GraphKey, cudaGraphExec_t> graphs;
  std::set<GraphKey> seen;  // keys run once without a graph
  void clear() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
    graphs.clear();
  }
};

template <typename T>
class CudaEngine final : public Engine {
 public:
  CudaEngine(const ModelConfig& c, const Weights& w, const TranslatorOptions& o)
      : c_(c), device_(o.device_index), alloc_(o.device_memory_limit), use_graphs_(graphs_enabled()) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    stream_ = device_stream(device_);
    check_cuda(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&cublas_), "cublasCreate");
    check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
    check_cuda(cudaStreamCreateWithFlags(&encode_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&encode_cublas_), "cublasCreate");
    check_cublas(cublasSetStream(encode_cublas_, encode_stream_), "cublasSetStream");
    check_cuda(cudaEventCreateWithFlags(&enc_uploaded_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&before_encode_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&encoded_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    for (StepLane& lane : lanes_) {
      check_cuda(cudaEventCreateWithFlags(&lane.stepped, cudaEventDisableTiming), "cudaEventCreate");
      if (profile_) {
        cudaEventCreate(&lane.start);
        cudaEventCreate(&lane.end);
      }
    }
    d_ = c.d_model;
    cache_cap_ = std::min(32, c.max_positions);
    embed_scale_ = c.scale_embedding ? std::sqrt(float(d_)) : 1.f;
    try {
      init(w);
      warm_up();
    } catch (...) {
      release_handles();
      throw;
    }
  }

  void init(const Weights& w) {
    if (d_ % c_.encoder_heads || d_ % c_.decoder_heads || d_ % 8)
      throw Error(ErrorCode::kInvalidArgument, "CUDA engine: d_model must be a multiple of 8 and of the heads");
    for (int heads : {c_.encoder_heads, c_.decoder_heads}) {
      const int hd = d_ / heads;
      if (hd != 4 && hd != 8 && hd != 16 && hd != 32 && hd != 64 && hd != 128)
        throw Error(ErrorCode::kInvalidArgument, "CUDA engine: attention head size " + std::to_string(hd) +
                                                     " (d_model / heads) is not supported: 4, 8, 16, 32, 64 or 128");
    }
    // Our own workspace: counted against the memory limit, and needed for graph capture.
    workspace_ = DeviceBuffer<char>(&alloc_, kCublasWorkspace);
    check_cublas(cublasSetWorkspace(cublas_, workspace_.get(), kCublasWorkspace), "cublasSetWorkspace");
    encode_workspace_ = DeviceBuffer<char>(&alloc_, kCublasWorkspace);
    check_cublas(cublasSetWorkspace(encode_cublas_, encode_workspace_.get(), kCublasWorkspace),
                 "cublasSetWorkspace");
    upload_weights(w);
  }

  // One sentence through encode and a step: CUDA loads kernels lazily and cuBLAS sets up on
  // first use, which made the first batch a server saw take ~190 ms on H100. The caller's
  // reserve() grows the small capacity this takes.
  void warm_up() {
    reserve(EngineCapacity{1, 1, 1});
    const std::vector<int> source{c_.eos_id};
    encode({EncodeItem{&source, 0}});
    StepInput in;
    in.groups.push_back(StepGroup{});  // slot 0, position 0, beam 1, k 1
    in.tokens = {c_.decoder_start_id};
    in.cache_rows = {0};
    in.parent_rows = {0};
    in.running_scores = {0.f};
    StepOutput out;
    step(in, &out);
    profile_stats_ = StepProfile();
  }

  ~CudaEngine() override {
    cudaSetDevice(device_);
    finish();
    if (profile_) {
      const StepProfile& p = profile_stats_;
      std::fprintf(stderr,
                   "nmt cuda profile: %ld encodes, %.1f us wall each; %ld steps: GPU %.1f us, "
                   "submit() + collect() wall %.1f us per step\n",
                   p.encodes, 1e3 * p.encode_wall_ms / std::max(p.encodes, 1L), p.steps,
                   1e3 * p.gpu_ms / std::max(p.steps, 1L), 1e3 * p.step_wall_ms / std::max(p.steps, 1L));
      for (StepLane& lane : lanes_) {
        cudaEventDestroy(lane.start);
        cudaEventDestroy(lane.end);
      }
    }
    step_graphs_.clear();
    encode_graphs_.clear();
    release_handles();
  }

  // The stream is the device's (device_stream()): not ours to destroy.
  void release_handles() {
    cublasDestroy(cublas_);
    cublasDestroy(encode_cublas_);
    cudaEventDestroy(enc_uploaded_);
    cudaEventDestroy(before_encode_);
    cudaEventDestroy(encoded_);
    cudaStreamDestroy(encode_stream_);
    cudaEventDestroy(done_);
    for (StepLane& lane : lanes_) cudaEventDestroy(lane.stepped);
    cudaStreamDestroy(capture_stream_);
  }

  // Waits for this engine's work on the shared stream, not for the other engines' work
  // enqueued after it, and for its last encode.
  cudaError_t finish() const noexcept {
    cudaError_t status = cudaEventRecord(done_, stream_);
    if (status == cudaSuccess) status = cudaEventSynchronize(done_);
    return status != cudaSuccess ? status : cudaEventSynchronize(encoded_);
  }
  void wait(const char* what = "synchronize") const { check_cuda(finish(), what); }

  int vocab_size() const override { return c_.target_vocab_size; }
  size_t memory_used() const override { return alloc_.held(); }
  int cache_positions() const override { return cache_cap_; }
  EngineCapacity capacity() const override { return cap_; }

  std::vector<float> encoder_output(size_t sentence) const override {
    cudaSetDevice(device_);
    if (sentence >= enc_lengths_.size())
      throw Error(ErrorCode::kInvalidArgument, "encoder_output: no such sentence");
    const size_t n = size_t(enc_lengths_[sentence]) * d_;
    const T* src = enc_.x[0].get() + sentence * enc_len_ * d_;
    std::vector<T> dev(n);
    check_cuda(cudaStreamWaitEvent(stream_, encoded_, 0), "encoder_output");
    check_cuda(cudaMemcpyAsync(dev.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, stream_),
               "encoder_output copy");
    wait("encoder_output sync");
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = float(dev[i]);
    return out;
  }

  void reserve(const EngineCapacity& capacity) override;
  void encode(const std::vector<EncodeItem>& items) override;
  void step(const StepInput& in, StepOutput* out) override;
  void submit(const StepInput& in, int lane) override;
  void collect(int lane, StepOutput* out) override;
  bool overlaps_steps() const override { return true; }
  // encode() without the profile's synchronize: the encode on encode_stream_, after the work
  // before_encode_ marks on the shared stream (which the caller records).
  void enqueue_encode(const std::vector<EncodeItem>& items);
  // The shared stream waits for the last encode: its sentences step from the next step on.
  void join_encode() {
    if (!encode_pending_) return;
    check_cuda(cudaStreamWaitEvent(stream_, encoded_, 0), "encode join");
    encode_pending_ = false;
  }
  void enqueue_encoder(const EncodeUpload& host, const EncodeUpload& dev, int n, int S);

 private:
  static constexpr size_t kCublasWorkspace = 8u << 20;

  struct Dense {  // y = x W^T (+ b fused elsewhere)
    const T* w = nullptr;
    const T* b = nullptr;
    int out = 0, in = 0;
  };
  struct Norm {
    const T* gamma = nullptr;
    const T* beta = nullptr;
  };
  struct EncoderLayer {
    Dense qkv, out, fc1, fc2;
    Norm attn_norm, ffn_norm;
  };
  struct DecoderLayer {
    Dense qkv, out, cross_q, cross_out, fc1, fc2;
    const T* cross_v_bias = nullptr;
    Norm self_norm, cross_norm, ffn_norm;
  };

  // ---------------------------------------------------------------- weights

  const T* upload(const std::vector<float>& host) {
    std::vector<T> conv(host.size());
    for (size_t i = 0; i < host.size(); ++i) conv[i] = T(host[i]);
    weights_.emplace_back(&alloc_, conv.size());
    check_cuda(cudaMemcpy(weights_.back().get(), conv.data(), conv.size() * sizeof(T),
                          cudaMemcpyHostToDevice), "weight upload");
    return weights_.back().get();
  }
  const T* upload(const HostTensor& t) {
    auto it = uploaded_.find(&t);  // tied tensors are uploaded once
    if (it != uploaded_.end()) return it->second;
    return uploaded_[&t] = upload(t.data);
  }
  static std::vector<float> concat(const std::vector<const HostTensor*>& parts) {
    std::vector<float> all;
    for (const HostTensor* p : parts) all.insert(all.end(), p->data.begin(), p->data.end());
    return all;
  }
  Dense dense(const Weights& w, const std::string& p) {
    const HostTensor& wt = w.get(p + ".weight");
    return {upload(wt), upload(w.get(p + ".bias")), int(wt.shape[0]), int(wt.shape[1])};
  }
  Dense fused_qkv(const Weights& w, const std::string& p) {
    const auto& q = w.get(p + "q_proj.weight");
    const T* wt = upload(concat({&q, &w.get(p + "k_proj.weight"), &w.get(p + "v_proj.weight")}));
    const T* b = upload(concat({&w.get(p + "q_proj.bias"), &w.get(p + "k_proj.bias"),
                                &w.get(p + "v_proj.bias")}));
    return {wt, b, 3 * int(q.shape[0]), int(q.shape[1])};
  }
  Norm norm(const Weights& w, const std::string& p) {
    return {upload(w.get(p + ".weight")), upload(w.get(p + ".bias"))};
  }

  void upload_weights(const Weights& w) {
    for (int l = 0; l < c_.encoder_layers; ++l) {
      const std::string p = layer_prefix(false, l);
      encoder_.push_back({fused_qkv(w, p + "self_attn."), dense(w, p + "self_attn.out_proj"),
                          dense(w, p + "fc1"), dense(w, p + "fc2"),
                          norm(w, p + "self_attn_layer_norm"), norm(w, p + "final_layer_norm")});
    }
    std::vector<const HostTensor*> cross_kv;
    for (int l = 0; l < c_.decoder_layers; ++l) {
      const std::string p = layer_prefix(true, l);
      DecoderLayer L;
      L.qkv = fused_qkv(w, p + "self_attn.");
      L.out = dense(w, p + "self_attn.out_proj");
      L.cross_q = dense(w, p + "encoder_attn.q_proj");
      L.cross_out = dense(w, p + "encoder_attn.out_proj");
      // The key bias shifts every score of a query alike, which softmax ignores: only the
      // value bias is needed (added to the attention output).
      L.cross_v_bias = upload(w.get(p + "encoder_attn.v_proj.bias"));
      L.fc1 = dense(w, p + "fc1");
      L.fc2 = dense(w, p + "fc2");
      L.self_norm = norm(w, p + "self_attn_layer_norm");
      L.cross_norm = norm(w, p + "encoder_attn_layer_norm");
      L.ffn_norm = norm(w, p + "final_layer_norm");
      decoder_.push_back(L);
      cross_kv.push_back(&w.get(p + "encoder_attn.k_proj.weight"));
      cross_kv.push_back(&w.get(p + "encoder_attn.v_proj.weight"));
    }
    // All layers' cross-attention K/V projections in one GEMM per encode: [L * 2d, d].
    cross_kv_w_ = upload(concat(cross_kv));
    // The output projection with zero rows up to logits_ld(), uploaded first so that tied
    // embeddings share it (they read rows < vocab only).
    const HostTensor& proj = w.output_projection();
    std::vector<float> padded(size_t(logits_ld()) * d_, 0.f);
    std::copy(proj.data.begin(), proj.data.end(), padded.begin());
    out_proj_ = uploaded_[&proj] = upload(padded);
    enc_emb_ = upload(w.encoder_embeddings());
    dec_emb_ = upload(w.decoder_embeddings());
    enc_pos_ = upload(w.encoder_positions());
    dec_pos_ = upload(w.decoder_positions());
    // a zero bias: none, and the top-k reads no bias per logit
    if (!w.output_bias_is_zero()) {
      const std::vector<float>& bias = w.output_bias().data;
      out_bias_ = DeviceBuffer<float>(&alloc_, bias.size());
      check_cuda(cudaMemcpy(out_bias_.get(), bias.data(), bias.size() * sizeof(float),
                            cudaMemcpyHostToDevice), "bias upload");
    }
    uploaded_.clear();
    check_cuda(cudaDeviceSynchronize(), "weight upload");
  }

  // ---------------------------------------------------------------- GEMM

  // y[M, N] = x[M, K] W[N, K]^T, row-major; batched over `batch` x/y blocks when > 1.
  template <typename TC>
  void gemm(const T* x, int64_t ldx, const T* w, TC* y, int64_t ldy, int M, int N, int K,
            int batch = 1, int64_t x_stride = 0, int64_t y_stride = 0) {
    if (M == 0) return;
    const float alpha = 1.f, beta = 0.f;
    if (batch == 1) {
      check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w,
                                cuda_type<T>(), K, x, cuda_type<T>(), int(ldx), &beta, y,
                                cuda_type<TC>(), int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    } else {
      check_cublas(cublasGemmStridedBatchedEx(
                       cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, cuda_type<T>(), K, 0,
                       x, cuda_type<T>(), int(ldx), x_stride, &beta, y, cuda_type<TC>(), int(ldy),
                       y_stride, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx");
    }
  }
  // y = x W^T, or with `act` y = act(x W^T + b). A few rows (a decode step at small batches) go
  // through kernels::small_gemm_cuda, which reads W once for all of them where cuBLAS's smallest
  // tiles are latency-bound, with the bias and activation in its epilogue; otherwise cuBLAS,
  // then bias_activation's launch. True when its last launch is a kernel of ours, which lets
  // the next one start only after its own wait (a cuBLAS kernel makes no such promise).
  bool linear(const T* x, const Dense& L, T* y, int rows, const kernels::Activation* act = nullptr) {
    const T* bias = act ? L.b : nullptr;
    if (kernels::small_gemm_supported<T>(x, L.in, L.w, bias, L.out, rows, L.in)) {
      kernels::small_gemm_cuda<T>(x, L.in, L.w, bias, y, L.out, rows, L.out, L.in, act, stream_);
      return true;
    }
    gemm(x, L.in, L.w, y, L.out, rows, L.out, L.in);
    if (act) kernels::bias_activation_cuda(y, bias, rows, L.out, *act, stream_);
    return act != nullptr;
  }

  // ---------------------------------------------------------------- persistent decode state

  // Everything reserve() sizes; the graphs point into it.
  struct DecodeState {
    DeviceBuffer<T> cross_kv;        // [sentences][source_tokens][L * 2d]: K | V of each layer
    DeviceBuffer<int> slot_lengths;  // [sentences]: source length of each slot
    DeviceBuffer<T> cache;           // [L * 2][rows + 1][cache_cap][d]
    DeviceBuffer<int> key_rows[2];   // ping-pong [rows + 1][cache_cap]: cache row of a position
    NextRowBuffers next_rows[2];     // ping-pong: a step follows the other parity's, writes its own
    DeviceBuffer<float> running;     // [padded rows]: the step's running scores, for its top-k
    DeviceBuffer<T> y[2], qkv, ctx, tmp, hidden;  // [padded rows][d (Residual's pair), 3d, d, d, ffn]
    DeviceBuffer<float> logits;                // [padded rows][logits_ld()]
    DeviceBuffer<char> topk_ws, step_in;  // step_in: the upload, copied by the step's first launch
  };

  // What a lane's step in flight needs until it is collected (Engine::submit()).
  struct StepLane {
    PinnedBuffer in, out;  // its packed upload and the top-k download
    cudaEvent_t stepped = nullptr;  // the end of its step's own work (not a riding encode)
    cudaEvent_t start = nullptr, end = nullptr;  // NMT_CUDA_PROFILE's
    StepShape pending;   // of the step in flight
    bool in_flight = false;  // a step to collect (an encode-only submit leaves none)
    double submit_wall_ms = 0;
  };

  // What an encode of up to `sentences` sentences and `rows` token rows runs on.
  struct EncodeBuffers {
    int sentences = 0, rows = 0;
    DeviceBuffer<char> in;  // EncodeUpload's device part
    DeviceBuffer<T> x[2], qkv, ctx, tmp, hidden;  // [rows][d (Residual's pair), 3d, d, d, ffn]
  };

  // Cache rows hold one beam each; cache row cap_.rows, past the caller's, is the padding
  // rows' scratch row (they all write and read its position 0 only; their results are
  // dropped).
  int scratch_row() const { return cap_.rows; }
  int64_t cache_plane() const { return int64_t(cap_.rows + 1) * cache_cap_ * d_; }
  T* cache(int layer, int kv) const {
    return state_.cache.get() + (int64_t(layer) * 2 + kv) * cache_plane();
  }
  int kv_cols() const { return 2 * c_.decoder_layers * d_; }
  // Row stride of the logits and rows of the output projection: the vocabulary rounded up to
  // 8, so that the GEMM's output dimension and rows are 16-byte aligned (with an odd
  // vocabulary cuBLAS falls back to an unaligned sm75 kernel: on H100 23 us for
  // 256 x 8001 x 256, 243 us for 256 x 58101 x 512). The padding columns are never read.
  int logits_ld() const { return (c_.target_vocab_size + 7) / 8 * 8; }

  // Top-k scratch for a run of up to `rows` padded rows and any k; the runs of a step share it
  // (they run one after another on the stream).
  size_t topk_workspace_bound(int rows) const {
    size_t most = 0;
    for (int r = 1; r <= rows; ++r)
      most = std::max(most, kernels::beam_topk_workspace_bytes(r, 1, c_.target_vocab_size, kMaxTopk));
    return most;
  }

  // Allocates the state of `cap` (the old one is released) with every slot length 0, so that
  // padding rows reading slot 0 see no keys before anything was encoded.
  void allocate_state(const EngineCapacity& cap) {
    const int rows = padded_rows_bound(cap.rows), cache_rows = cap.rows + 1;
    const size_t d = size_t(d_);
    DecodeState s;
    s.cross_kv = DeviceBuffer<T>(&alloc_, size_t(cap.sentences) * cap.source_tokens * kv_cols());
    s.slot_lengths = DeviceBuffer<int>(&alloc_, size_t(cap.sentences));
    s.cache = DeviceBuffer<T>(&alloc_, size_t(2) * c_.decoder_layers * cache_rows * cache_cap_ * d);
    for (auto& t : s.key_rows) t = DeviceBuffer<int>(&alloc_, size_t(cache_rows) * cache_cap_);
    for (NextRowBuffers& n : s.next_rows) {
      n.tokens = DeviceBuffer<int>(&alloc_, size_t(rows));
      n.parents = DeviceBuffer<int>(&alloc_, size_t(rows));
      n.running = DeviceBuffer<float>(&alloc_, size_t(rows));
    }
    s.running = DeviceBuffer<float>(&alloc_, size_t(rows));
    for (auto& y : s.y) y = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
    s.qkv = DeviceBuffer<T>(&alloc_, size_t(rows) * 3 * d);
    s.ctx = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
    s.tmp = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
    s.hidden = DeviceBuffer<T>(&alloc_, size_t(rows) * std::max(c_.decoder_ffn_dim, 1));
    s.logits = DeviceBuffer<float>(&alloc_, size_t(rows) * logits_ld());
    s.topk_ws = DeviceBuffer<char>(&alloc_, topk_workspace_bound(rows));
    s.step_in = DeviceBuffer<char>(&alloc_, StepUpload::bytes(rows, rows));
    for (StepLane& lane : lanes_) {
      lane.in.reserve(StepUpload::bytes(rows, rows));
      lane.out.reserve(size_t(2) * rows * kMaxTopk * sizeof(int));
    }
    parity_ = 0;
    last_step_rows_.clear();  // nothing to follow in the new state
    if (cap.sentences > 0)
      check_cuda(cudaMemsetAsync(s.slot_lengths.get(), 0, size_t(cap.sentences) * sizeof(int),
                                 stream_), "slot lengths");
    state_ = std::move(s);
    slot_lengths_.assign(size_t(cap.sentences), 0);
    cap_ = cap;
    padded_rows_cap_ = rows;
  }

  void drop_graphs(GraphCache& cache) {
    if (cache.graphs.empty()) return;
    wait("drop graphs");
    cache.clear();
  }
  void drop_graphs() {
    drop_graphs(step_graphs_);
    drop_graphs(encode_graphs_);  // they write the slot-length table, which reserve() replaces
  }

  // Doubles the caches' positions (up to max_positions) keeping their contents and both
  // key-row tables.
  void grow_cache(int positions) {
    if (positions <= cache_cap_) return;
    int cap = cache_cap_;
    while (cap < positions) cap *= 2;
    cap = std::min(cap, c_.max_positions);
    const int64_t rows = cap_.rows + 1, planes = int64_t(2) * c_.decoder_layers * rows;
    DeviceBuffer<T> next(&alloc_, size_t(planes) * cap * d_);
    DeviceBuffer<int> next_rows[2] = {DeviceBuffer<int>(&alloc_, size_t(rows) * cap),
                                      DeviceBuffer<int>(&alloc_, size_t(rows) * cap)};
    drop_graphs(step_graphs_);
    check_cuda(cudaMemcpy2DAsync(next.get(), size_t(cap) * d_ * sizeof(T), state_.cache.get(),
                                 size_t(cache_cap_) * d_ * sizeof(T),
                                 size_t(cache_cap_) * d_ * sizeof(T), planes,
                                 cudaMemcpyDeviceToDevice, stream_), "cache growth");
    for (int t = 0; t < 2; ++t) {
      check_cuda(cudaMemcpy2DAsync(next_rows[t].get(), size_t(cap) * sizeof(int),
                                   state_.key_rows[t].get(), size_t(cache_cap_) * sizeof(int),
                                   size_t(cache_cap_) * sizeof(int), rows,
                                   cudaMemcpyDeviceToDevice, stream_), "cache growth");
      state_.key_rows[t] = std::move(next_rows[t]);
    }
    state_.cache = std::move(next);
    cache_cap_ = cap;
  }

  // ---------------------------------------------------------------- encode

  // kInvalidArgument for bad sources (as the CPU engine), kInternal for bad slots.
  void check_sources(const std::vector<EncodeItem>& items) const {
    std::vector<char> taken(size_t(cap_.sentences), 0);
    for (const EncodeItem& item : items) {
      if (!item.ids || item.ids->empty())
        throw Error(ErrorCode::kInvalidArgument, "empty source sentence");
      const std::vector<int>& s = *item.ids;
      if (int64_t(s.size()) > c_.max_positions)
        throw Error(ErrorCode::kInvalidArgument,
                    "source sentence has " + std::to_string(s.size()) +
                        " tokens, more than the model's " + std::to_string(c_.max_positions) + " positions");
      if (int64_t(s.size()) > cap_.source_tokens)
        throw Error(ErrorCode::kInvalidArgument,
                    "source sentence has " + std::to_string(s.size()) + " tokens, more than the " +
                        std::to_string(cap_.source_tokens) + " the CUDA engine reserved");
      for (int id : s)
        if (id < 0 || id >= c_.vocab_size)
          throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary");
      if (item.slot < 0 || item.slot >= cap_.sentences || taken[size_t(item.slot)]++)
        throw Error(ErrorCode::kInternal, "CUDA engine encode: slot " + std::to_string(item.slot) +
                                              " is out of range or given twice");
    }
  }

  // Encoder buffers for n sentences of `rows` tokens in all, grown in steps, and the pinned
  // upload buffer for them and the slot table. The encode graphs point into both: a growth
  // drops them.
  void reserve_encode(int n, int rows) {
    if (n > enc_.sentences || rows > enc_.rows) {
      drop_graphs(encode_graphs_);
      check_cuda(cudaEventSynchronize(encoded_), "encode");  // the last encode's buffers
      const int sentences = std::max(enc_.sentences, (n + 15) / 16 * 16);
      const int most = std::max(enc_.rows, (rows + 1023) / 1024 * 1024);
      const size_t d = size_t(d_);
      enc_ = EncodeBuffers();  // release first: a lower peak
      EncodeBuffers b;
      b.sentences = sentences;
      b.rows = most;
      b.in = DeviceBuffer<char>(&alloc_, EncodeUpload::device_bytes(sentences, most));
      for (auto& x : b.x) x = DeviceBuffer<T>(&alloc_, size_t(most) * d);
      b.qkv = DeviceBuffer<T>(&alloc_, size_t(most) * 3 * d);
      b.ctx = DeviceBuffer<T>(&alloc_, size_t(most) * d);
      b.tmp = DeviceBuffer<T>(&alloc_, size_t(most) * d);
      b.hidden = DeviceBuffer<T>(&alloc_, size_t(most) * std::max(c_.encoder_ffn_dim, 1));
      enc_ = std::move(b);
    }
    const size_t upload = EncodeUpload::bytes(enc_.sentences, enc_.rows, cap_.sentences);
    if (enc_in_.capacity() < upload) {
      drop_graphs(encode_graphs_);
      check_cuda(cudaEventSynchronize(enc_uploaded_), "encode upload");
      enc_in_.reserve(upload);
    }
  }

  // ---------------------------------------------------------------- decode step

  // kInvalidArgument as the CPU engine (positions past the model, k, token ids), kInternal for
  // inputs the decode loop never gives (row counts, slots and cache rows out of range, one
  // cache row written twice).
  void check_step(const StepInput& in) const {
    size_t rows = 0;
    for (const StepGroup& g : in.groups) {
      if (g.position >= c_.max_positions)
        throw Error(ErrorCode::kInvalidArgument,
                    "decoding past the model's " + std::to_string(c_.max_positions) + " positions");
      if (g.beam < 1 || g.position < 0 || g.slot < 0 || g.slot >= cap_.sentences)
        throw Error(ErrorCode::kInternal, "CUDA engine step: a sentence's beam, position or slot is out of range");
      if (g.k < 1 || g.k > kMaxTopk || int64_t(g.k) > int64_t(g.beam) * c_.target_vocab_size)
        throw Error(ErrorCode::kInvalidArgument, "CUDA engine: k = " + std::to_string(g.k) +
                                                     " candidates per sentence is not supported");
      rows += size_t(g.beam);
    }
    if (in.tokens.size() != rows || in.cache_rows.size() != rows ||
        in.parent_rows.size() != rows || in.running_scores.size() != rows)
      throw Error(ErrorCode::kInternal, "CUDA engine step: per-row inputs do not match the sentences' beams");
    for (const StepGroup& g : in.groups) {
      if (g.follows < 0) continue;
      if (size_t(g.follows) >= last_step_rows_.size() || last_step_beams_[size_t(g.follows)] != g.beam || g.position < 1)
        throw Error(ErrorCode::kInternal, "CUDA engine step: a sentence follows no sentence of its beam in the step before");
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
  // its padding sentences.
  void fill_upload(const StepInput& in, const StepShape& shape, StepLane& lane) {
    const StepUpload h(lane.in.get(), shape.rows);
    size_t group = 0, row = 0;  // next real sentence and row of `in`
    for (const Run& run : shape.runs) {
      int r = run.first_row;
      for (int s = 0; s < run.padded; ++s) {
        const bool real = s < run.sentences;
        const StepGroup* g = real ? &in.groups[group++] : nullptr;
        h.flags[run.first_sentence + s] =
            real ? (g->mask_eos ? kernels::kTopkMaskEos : 0) | (g->force_eos ? kernels::kTopkForceEos : 0) : 0;
        for (int b = 0; b < run.beam; ++b, ++r) {
          h.tokens[r] = real ? in.tokens[row] : c_.pad_id;
          h.cache_rows[r] = real ? in.cache_rows[row] : scratch_row();
          // position 0 reads no history: its parent row is never read
          h.parents[r] = real && g->position > 0 ? in.parent_rows[row] : h.cache_rows[r];
          h.positions[r] = real ? g->position : 0;
          h.slots[r] = real ? g->slot : 0;
          h.follow[r] = real && g->follows >= 0 ? last_step_rows_[size_t(g->follows)] + b : -1;
          h.running[r] = real ? in.running_scores[row] : 0.f;
          row += real;
        }
      }
    }
  }

  // Everything a step enqueues (its graph): from reading the packed upload to writing the
  // top-k candidates, both in the lane's pinned buffers.
  void enqueue_step(const StepShape& shape, const StepLane& lane) {
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
    upload.bytes = int64_t(StepUpload::bytes(rows, shape.sentences));
    const StepUpload dev(state_.step_in.get(), rows), host(lane.in.get(), rows);
    const int d = d_, hd = d_ / c_.decoder_heads;
    Residual x{{state_.y[0].get(), state_.y[1].get()}};
    // Beam reorder (only the small table of which cache row holds each position moves) and
    // the tokens' embeddings, in one launch.
    kernels::RowEmbedding<T> embed;
    embed.ids = host.tokens; embed.embeddings = dec_emb_; embed.positions_table = dec_pos_;
    embed.out = x.current; embed.d_model = d; embed.scale = embed_scale_;
    // Rows that follow the step before take their tokens, parents and running scores from
    // its next rows (the other parity's); every row's running score goes to state_.running.
    const NextRowBuffers& before = state_.next_rows[parity];
    kernels::StepFollow follow;
    follow.rows = host.follow;
    follow.tokens = before.tokens.get(); follow.parents = before.parents.get(); follow.running = before.running.get();
    follow.running_in = host.running; follow.running_out = state_.running.get();
    kernels::beam_reorder_and_embed_cuda<T>(state_.key_rows[parity].get(),
                                            state_.key_rows[1 - parity].get(), host.parents, rows,
                                            cache_cap_, host.positions, host.cache_rows, embed, stream_,
                                            upload, follow);
    for (int l = 0; l < c_.decoder_layers; ++l) {
      const DecoderLayer& L = decoder_[size_t(l)];
      const bool qkv_ours = norm_linear(x, L.qkv, state_.qkv.get(), rows);
      kernels::DecoderSelfAttentionArgs<T> self;
      self.qkv = state_.qkv.get(); self.bias = L.qkv.b;
      self.k_cache = cache(l, 0); self.v_cache = cache(l, 1);
      self.key_rows = state_.key_rows[1 - parity].get();  // the table just reordered
      self.positions = dev.positions; self.cache_rows = dev.cache_rows;
      self.out = state_.ctx.get();
      self.rows = rows; self.capacity = cache_cap_; self.heads = c_.decoder_heads; self.head_dim = hd;
      self.scale = 1.f / std::sqrt(float(hd));
      // Settled: the reorder wrote the key-row table two launches ago in layer 0, where that
      // needs the launch between to be ours (a cuBLAS kernel might let this one start before
      // waiting for the reorder), and many launches ago in the later layers.
      self.history_settled = l > 0 || qkv_ours;
      kernels::decoder_self_attention_cuda(self, stream_);
      linear(state_.ctx.get(), L.out, state_.tmp.get(), rows);
      x.add(state_.tmp.get(), L.out.b, L.self_norm);

      norm_linear(x, L.cross_q, state_.qkv.get(), rows);  // the query into qkv's first columns
      kernels::AttentionArgs<T> cross;
      cross.q = state_.qkv.get(); cross.q_bias = L.cross_q.b;
      cross.q_batch_stride = cross.q_row_stride = d;
      cross.k = state_.cross_kv.get() + int64_t(l) * 2 * d; cross.v = cross.k + d;
      cross.kv_row_stride = kv_cols();
      cross.kv_batch_stride = int64_t(cap_.source_tokens) * cross.kv_row_stride;
      cross.v_bias = L.cross_v_bias;
      cross.kv_index = dev.slots; cross.key_lengths = state_.slot_lengths.get();
      cross.out = state_.ctx.get(); cross.out_batch_stride = cross.out_row_stride = d;
      cross.batch = rows; cross.q_len = 1; cross.heads = c_.decoder_heads; cross.head_dim = hd;
      cross.kv_len = cap_.source_tokens; cross.scale = self.scale;
      cross.kv_settled = true;  // written by the encode, behind an earlier step
      kernels::attention_cuda(cross, stream_);
      linear(state_.ctx.get(), L.cross_out, state_.tmp.get(), rows);
      x.add(state_.tmp.get(), L.cross_out.b, L.cross_norm);

      feed_forward(x, L.fc1, L.fc2, L.ffn_norm, state_.hidden.get(), state_.tmp.get(), rows);
    }
    project_logits(x, rows);
    enqueue_topk(shape, dev, static_cast<int*>(lane.out.get()), state_.next_rows[1 - parity]);
  }

  // One top-k launch per run, on its rows, with its sentences' flags; `out` takes the scores
  // (float), then the candidates, and `next` the rows each sentence goes on with.
  void enqueue_topk(const StepShape& shape, const StepUpload& dev, int* out, const NextRowBuffers& next) {
    float* scores = reinterpret_cast<float*>(out);
    int* index = out + shape.outputs;
    kernels::TopkMasks masks;
    masks.pad_id = c_.pad_id;
    masks.eos_id = c_.eos_id;
    for (const Run& run : shape.runs) {
      masks.sentence_flags = dev.flags + run.first_sentence;
      kernels::NextRows rows;
      rows.cache_rows = dev.cache_rows + run.first_row;
      rows.tokens = next.tokens.get() + run.first_row;
      rows.parents = next.parents.get() + run.first_row;
      rows.running = next.running.get() + run.first_row;
      kernels::beam_topk_cuda<float>(
          state_.logits.get() + int64_t(run.first_row) * logits_ld(), out_bias_.get(),
          state_.running.get() + run.first_row, run.padded, run.beam, c_.target_vocab_size, run.k, masks,
          scores + run.first_output, index + run.first_output, state_.topk_ws.get(),
          state_.topk_ws.size(), stream_, logits_ld(), &rows);
    }
  }

  StepLane& step_lane(int lane) {
    if (lane < 0 || lane >= kStepLanes)
      throw Error(ErrorCode::kInternal, "CUDA engine: no step lane " + std::to_string(lane));
    return lanes_[lane];
  }

  // A lane's graphs copy from and to its own pinned buffers; a parity's read and write its
  // key-row tables and next-row buffers.
  GraphKey graph_key(const StepShape& shape, int lane) const {
    GraphKey key{lane, parity_};
    for (const Run& r : shape.runs) key.insert(key.end(), {r.beam, r.k, r.padded});
    return key;
  }

  // The step on the stream, then the other parity's key-row table and next rows are current.
  // The first padded row and the beam of each of its sentences stay for the next step to follow.
  void launch_step(const StepShape& shape, const std::vector<StepGroup>& groups, int lane) {
    StepLane& l = lanes_[lane];
    launch(step_graphs_, graph_key(shape, lane), [&] { enqueue_step(shape, l); });
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

  // `enqueue`'s work on the stream: the graph of `key` when captured, else plain launches.
  void launch(GraphCache& cache, const GraphKey& key, const std::function<void()>& enqueue) {
    if (!use_graphs_) return enqueue();
    auto it = cache.graphs.find(key);
    if (it == cache.graphs.end()) {
      if (cache.seen.insert(key).second) return enqueue();
      it = cache.graphs.emplace(key, capture(enqueue)).first;
    }
    check_cuda(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
  }

  // Captured on the engine's private stream (the shared one may get other engines' work while
  // this one captures), replayed on the shared one.
  cudaGraphExec_t capture(const std::function<void()>& enqueue) {
    cudaGraph_t graph = nullptr;
    cudaStream_t shared = stream_;
    auto end_capture = [&] {
      const cudaError_t status = cudaStreamEndCapture(capture_stream_, &graph);
      stream_ = shared;
      cublasSetStream(cublas_, stream_);
      return status;
    };
    check_cuda(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal), "graph capture");
    stream_ = capture_stream_;
    try {
      check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
      enqueue();
    } catch (...) {
      end_capture();
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    check_cuda(end_capture(), "graph capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(status, "cudaGraphInstantiate");
    return exec;
  }

  // The real sentences' k best of the downloaded step output, in group order.
  void collect_output(const StepShape& shape, const StepLane& lane, StepOutput* out) const {
    const float* scores = static_cast<const float*>(lane.out.get());
    const int* index = static_cast<const int*>(lane.out.get()) + shape.outputs;
    for (const Run& run : shape.runs) {
      const size_t first = size_t(run.first_output), n = size_t(run.sentences) * run.k;
      out->scores.insert(out->scores.end(), scores + first, scores + first + n);
      out->candidates.insert(out->candidates.end(), index + first, index + first + n);
    }
  }

  // The post-norm residual stream of a layer stack, [rows, d]: after each sublayer it becomes
  // LN(current + sub + bias). That LayerNorm is left pending and done by the next projection's
  // small GEMM in its prologue where it can (norm_linear: no launch of its own), or by
  // layer_norm_cuda otherwise (more rows than the small GEMM takes, settle()). It writes the
  // other buffer of the pair: the GEMM's other blocks still read the current one.
  struct Residual {
    T* buffers[2];
    T* current = buffers[0];
    const T* sub = nullptr;  // pending: current = LN(current + sub + bias)
    const T* bias = nullptr;
    const Norm* norm = nullptr;

    void add(const T* sublayer, const T* sublayer_bias, const Norm& n) {
      sub = sublayer;
      bias = sublayer_bias;
      norm = &n;
    }
    T* next() const { return current == buffers[0] ? buffers[1] : buffers[0]; }
    void advance() {
      current = next();
      sub = nullptr;
    }
  };

  // y = L(x.current) (see linear(), also for what it returns) with x's pending LayerNorm done
  // first.
  bool norm_linear(Residual& x, const Dense& L, T* y, int rows, const kernels::Activation* act = nullptr) {
    if (!x.sub) return linear(x.current, L, y, rows, act);
    const kernels::SmallGemmNorm<T> n = pending_norm(x);
    const T* bias = act ? L.b : nullptr;
    if (!kernels::small_gemm_supported<T>(x.sub, L.in, L.w, bias, L.out, rows, L.in, &n))
      return linear(settle(x, rows), L, y, rows, act);
    kernels::small_gemm_cuda<T>(x.sub, L.in, L.w, bias, y, L.out, rows, L.out, L.in, act, stream_, &n);
    x.advance();
    return true;
  }

  // x's pending LayerNorm as the small GEMM's prologue takes it (x.sub set).
  kernels::SmallGemmNorm<T> pending_norm(const Residual& x) const {
    kernels::SmallGemmNorm<T> n;
    n.residual = x.current;
    n.bias = x.bias;
    n.gamma = x.norm->gamma;
    n.beta = x.norm->beta;
    n.eps = c_.layer_norm_eps;
    n.out = x.next();
    return n;
  }

  // The step's float32 logits = LN(x) out_proj^T: at a few rows one small_gemm_logits_cuda
  // launch with the pending LayerNorm in its prologue (cuBLAS follows a LayerNorm launch of its
  // own and lets nothing after it start early); otherwise the LayerNorm, then cuBLAS.
  void project_logits(Residual& x, int rows) {
    const int d = d_;
    const kernels::SmallGemmNorm<T> pending = x.sub ? pending_norm(x) : kernels::SmallGemmNorm<T>{};
    const kernels::SmallGemmNorm<T>* norm = x.sub ? &pending : nullptr;
    const T* in = x.sub ? x.sub : x.current;
    if (kernels::small_gemm_logits_supported<T>(in, d, out_proj_, logits_ld(), rows, d, norm)) {
      kernels::small_gemm_logits_cuda<T>(in, d, out_proj_, state_.logits.get(), logits_ld(), rows,
                                         logits_ld(), d, stream_, norm);
      if (x.sub) x.advance();
      return;
    }
    gemm(settle(x, rows), d, out_proj_, state_.logits.get(), logits_ld(), rows, logits_ld(), d);
  }

  // x's pending LayerNorm done on its own; returns the stream's value.
  const T* settle(Residual& x, int rows) {
    if (!x.sub) return x.current;
    kernels::layer_norm_cuda(x.sub, x.current, x.bias, x.norm->gamma, x.norm->beta, x.next(), rows,
                             d_, c_.layer_norm_eps, stream_);
    x.advance();
    return x.current;
  }

  // x = LN(x + fc2(act(fc1 x + b1)) + b2), left pending; hidden: [rows, ffn] scratch
  void feed_forward(Residual& x, const Dense& fc1, const Dense& fc2, const Norm& n, T* hidden, T* tmp,
                    int rows) {
    norm_linear(x, fc1, hidden, rows, &c_.activation);
    linear(hidden, fc2, tmp, rows);
    x.add(tmp, fc2.b, n);
  }

  const ModelConfig c_;
  const int device_;
  DeviceAllocator alloc_;  // first member with device memory: destroyed last
  const bool use_graphs_;
  cudaStream_t stream_ = nullptr;          // the device's shared stream (device_stream())
  cudaStream_t capture_stream_ = nullptr;  // private: graph captures only
  cudaEvent_t done_ = nullptr;             // wait(): the end of this engine's work so far
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer<char> workspace_;
  int d_ = 0;
  float embed_scale_ = 1.f;

  std::vector<DeviceBuffer<T>> weights_;
  std::map<const HostTensor*, const T*> uploaded_;
  std::vector<EncoderLayer> encoder_;
  std::vector<DecoderLayer> decoder_;
  const T* cross_kv_w_ = nullptr;
  const T *enc_emb_ = nullptr, *dec_emb_ = nullptr, *out_proj_ = nullptr;
  const T *enc_pos_ = nullptr, *dec_pos_ = nullptr;
  DeviceBuffer<float> out_bias_;

  // The encoder's buffers (the encode graphs point into them; only grow) and the last
  // encode(): its output is enc_.x, [items][enc_len_][d] in item order.
  EncodeBuffers enc_;
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
  cudaStream_t encode_stream_ = nullptr;
  cublasHandle_t encode_cublas_ = nullptr;
  DeviceBuffer<char> encode_workspace_;
  cudaEvent_t before_encode_ = nullptr;
  cudaEvent_t encoded_ = nullptr;
  bool encode_pending_ = false;  // the shared stream has not yet waited for encoded_

  // persistent decode state (reserve(); only grows)
  EngineCapacity cap_;
  int cache_cap_ = 0;        // positions per cache row: doubles up to max_positions
  int padded_rows_cap_ = 0;  // rows of the step buffers
  DecodeState state_;
  std::vector<int> slot_lengths_;  // host mirror of state_.slot_lengths
  StepLane lanes_[kStepLanes];
  // Every step flips the key-row table it reorders from and the next-row buffers it follows
  // (so a sentence's rows must be in every step from its first to its last, as DecodeLoop
  // steps them); the last step's sentences, for the next one to follow (StepGroup::follows).
  int parity_ = 0;
  std::vector<int> last_step_rows_, last_step_beams_;
  GraphCache step_graphs_, encode_graphs_;
  const bool profile_ = profile_enabled();
  StepProfile profile_stats_;
};

template <typename T>
void CudaEngine<T>::reserve(const EngineCapacity& want) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const EngineCapacity next{std::max(cap_.sentences, want.sentences), std::max(cap_.rows, want.rows),
                            std::max(cap_.source_tokens, want.source_tokens)};
  if (next.sentences == cap_.sentences && next.rows == cap_.rows &&
      next.source_tokens == cap_.source_tokens)
    return;
  const EngineCapacity previous = cap_;
  drop_graphs();
  wait("reserve");  // an encode may still write the slots being released
  // Release first (lower peak); when the new state does not fit, the previous one again (the
  // memory it held a moment ago), so the engine stays usable.
  state_ = DecodeState();
  cap_ = EngineCapacity();
  try {
    allocate_state(next);
  } catch (const Error&) {
    allocate_state(previous);
    throw;
  }
}

template <typename T>
void CudaEngine<T>::encode(const std::vector<EncodeItem>& items) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const auto wall0 = std::chrono::steady_clock::now();
  check_cuda(cudaEventRecord(before_encode_, stream_), "encode");
  enqueue_encode(items);
  join_encode();
  if (profile_) {
    wait();
    profile_stats_.encodes++;
    profile_stats_.encode_wall_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  }
}

template <typename T>
void CudaEngine<T>::enqueue_encode(const std::vector<EncodeItem>& items) {
  check_sources(items);
  enc_lengths_.clear();
  const int n = int(items.size());
  if (n == 0) return;
  int S = 0;
  for (const EncodeItem& item : items) {
    enc_lengths_.push_back(int(item.ids->size()));
    S = std::max(S, enc_lengths_.back());
  }
  // check_sources keeps S within both limits, and so does the padding
  S = std::min((S + kEncodeLengthStep - 1) / kEncodeLengthStep * kEncodeLengthStep,
               std::min(cap_.source_tokens, c_.max_positions));
  const int rows = n * S;
  reserve_encode(n, rows);

  // The pinned buffer may still feed the previous encode's upload (an encode inside a step
  // must not wait for the step itself: an event, not a stream synchronize).
  check_cuda(cudaEventSynchronize(enc_uploaded_), "encode upload");
  const EncodeUpload host(enc_in_.get(), n, rows), dev(enc_.in.get(), n, rows);
  const int64_t slot_stride = int64_t(cap_.source_tokens) * kv_cols();
  for (int b = 0; b < n; ++b) {
    const std::vector<int>& src = *items[size_t(b)].ids;
    const int length = enc_lengths_[size_t(b)];
    for (int t = 0; t < S; ++t) {
      host.ids[b * S + t] = t < length ? src[size_t(t)] : c_.pad_id;
      host.positions[b * S + t] = t;
    }
    host.lengths[b] = length;
    host.weights[b] = cross_kv_w_;
    host.inputs[b] = enc_.x[0].get() + int64_t(b) * S * d_;
    host.outputs[b] = state_.cross_kv.get() + items[size_t(b)].slot * slot_stride;
    slot_lengths_[size_t(items[size_t(b)].slot)] = length;
  }
  // The whole table goes up, beside the step in flight: it changes only the newcomers'
  // entries, which that step reads for no row it keeps.
  std::copy(slot_lengths_.begin(), slot_lengths_.end(), host.slot_lengths);
  check_cuda(cudaStreamWaitEvent(encode_stream_, before_encode_, 0), "encode");
  // The encoder's code enqueues on stream_ with cublas_: both point at the encode's own while
  // it is enqueued (and captured: the graph then holds the encode handle's workspace).
  struct EncodeSide {
    CudaEngine& e;
    cudaStream_t stream;
    cublasHandle_t cublas;
    explicit EncodeSide(CudaEngine& engine) : e(engine), stream(engine.stream_), cublas(engine.cublas_) {
      e.stream_ = e.encode_stream_;
      e.cublas_ = e.encode_cublas_;
    }
    ~EncodeSide() {
      e.stream_ = stream;
      e.cublas_ = cublas;
    }
  };
  {
    EncodeSide side(*this);
    launch(encode_graphs_, {n, S}, [&] { enqueue_encoder(host, dev, n, S); });
  }
  check_cuda(cudaEventRecord(enc_uploaded_, encode_stream_), "encode upload");
  check_cuda(cudaEventRecord(encoded_, encode_stream_), "encode");
  encode_pending_ = true;
  enc_len_ = S;
}

// The encode of n sentences padded to S tokens whose upload `host` holds: the upload, the
// encoder, and each sentence's cross-attention K/V of every decoder layer straight into its
// slot (one batched GEMM through the uploaded pointer arrays).
template <typename T>
void CudaEngine<T>::enqueue_encoder(const EncodeUpload& host, const EncodeUpload& dev, int n, int S) {
  const int d = d_, rows = n * S;
  check_cuda(cudaMemcpyAsync(dev.ids, host.ids, EncodeUpload::device_bytes(n, rows),
                             cudaMemcpyHostToDevice, stream_), "encode upload");
  check_cuda(cudaMemcpyAsync(state_.slot_lengths.get(), host.slot_lengths,
                             slot_lengths_.size() * sizeof(int), cudaMemcpyHostToDevice, stream_),
             "encode upload");
  Residual x{{enc_.x[0].get(), enc_.x[1].get()}};
  kernels::embed_positions_cuda<T>(dev.ids, enc_emb_, enc_pos_, dev.positions, x.current, rows, d,
                                   embed_scale_, stream_);
  const int hd = d / c_.encoder_heads;
  for (const EncoderLayer& L : encoder_) {
    norm_linear(x, L.qkv, enc_.qkv.get(), rows);
    kernels::AttentionArgs<T> a;
    a.q = enc_.qkv.get(); a.q_bias = L.qkv.b;
    a.k = enc_.qkv.get() + d; a.v = enc_.qkv.get() + 2 * d; a.v_bias = L.qkv.b + 2 * d;
    a.q_batch_stride = a.kv_batch_stride = int64_t(S) * 3 * d;
    a.q_row_stride = a.kv_row_stride = 3 * d;
    a.key_lengths = dev.lengths;
    a.out = enc_.ctx.get(); a.out_batch_stride = int64_t(S) * d; a.out_row_stride = d;
    a.batch = n; a.q_len = a.kv_len = S; a.heads = c_.encoder_heads; a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    kernels::attention_cuda(a, stream_);
    linear(enc_.ctx.get(), L.out, enc_.tmp.get(), rows);
    x.add(enc_.tmp.get(), L.out.b, L.attn_norm);
    feed_forward(x, L.fc1, L.fc2, L.ffn_norm, enc_.hidden.get(), enc_.tmp.get(), rows);
  }
  // host.inputs and encoder_output() read x[0]: two LayerNorms a layer, each moving the stream
  // to the other buffer of the pair, leave the output there.
  settle(x, rows);
  const float alpha = 1.f, beta = 0.f;
  const int cols = kv_cols();
  check_cublas(cublasGemmBatchedEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, cols, S, d, &alpha,
                                   dev.weights, cuda_type<T>(), d, dev.inputs, cuda_type<T>(), d,
                                   &beta, dev.outputs, cuda_type<T>(), cols, n, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
               "cublasGemmBatchedEx");
}

template <typename T>
void CudaEngine<T>::step(const StepInput& in, StepOutput* out) {
  submit(in, 0);
  collect(0, out);
}

template <typename T>
void CudaEngine<T>::submit(const StepInput& in, int lane_index) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  StepLane& lane = step_lane(lane_index);
  const auto wall0 = std::chrono::steady_clock::now();
  // A step never collected (its loop was dropped) still owns the lane's pinned buffers.
  if (lane.in_flight) check_cuda(cudaEventSynchronize(lane.stepped), "decode step");
  lane.in_flight = false;
  check_step(in);
  if (in.groups.empty()) {  // an encode only: collect() has no candidates to wait for
    if (in.encode) {
      check_cuda(cudaEventRecord(before_encode_, stream_), "encode");
      enqueue_encode(*in.encode);
    }
    return;
  }
  const StepShape shape = shape_of(in.groups);
  if (shape.rows > padded_rows_cap_)  // cannot happen: check_step bounds the rows by cap_.rows
    throw Error(ErrorCode::kInternal, "CUDA engine step: padded rows exceed the step buffers");
  int last_position = 0;
  for (const StepGroup& g : in.groups) last_position = std::max(last_position, g.position);
  grow_cache(last_position + 1);
  fill_upload(in, shape, lane);  // the lane's previous step has been waited for

  join_encode();  // the last encode's sentences may step now
  if (in.encode) check_cuda(cudaEventRecord(before_encode_, stream_), "encode");
  if (profile_) cudaEventRecord(lane.start, stream_);
  launch_step(shape, in.groups, lane_index);
  if (profile_) cudaEventRecord(lane.end, stream_);
  check_cuda(cudaEventRecord(lane.stepped, stream_), "decode step");
  lane.pending = shape;
  lane.in_flight = true;
  // Newcomers' encode runs beside the step on its own stream; they join at the next step,
  // which waits for it. collect() waits for the step only.
  if (in.encode) enqueue_encode(*in.encode);
  lane.submit_wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
}

template <typename T>
void CudaEngine<T>::collect(int lane_index, StepOutput* out) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  StepLane& lane = step_lane(lane_index);
  out->scores.clear();
  out->candidates.clear();
  if (!lane.in_flight) return;
  const auto wall0 = std::chrono::steady_clock::now();
  lane.in_flight = false;
  check_cuda(cudaEventSynchronize(lane.stepped), "decode step");
  collect_output(lane.pending, lane, out);
  if (profile_) {
    float ms = 0;
    cudaEventElapsedTime(&ms, lane.start, lane.end);
    profile_stats_.steps++;
    profile_stats_.gpu_ms += ms;
    profile_stats_.step_wall_ms +=
        lane.submit_wall_ms +
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  }
}

}  // namespace
}  // namespace cuda

std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& config, const Weights& weights,
                                         const TranslatorOptions& options) {
  const int n = cuda_device_count();
  if (n == 0)
    throw Error(ErrorCode::kInvalidArgument, "device 'cuda' requested, but no CUDA device is visible");
  if (options.device_index < 0 || options.device_index >= n)
    throw Error(ErrorCode::kInvalidArgument,
                "device_index " + std::to_string(options.device_index) + " is out of range: " +
                    std::to_string(n) + " CUDA device(s) visible");
  if (options.precision == Precision::kFloat16)
    return std::make_unique<cuda::CudaEngine<__half>>(config, weights, options);
  return std::make_unique<cuda::CudaEngine<float>>(config, weights, options);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace nmt
