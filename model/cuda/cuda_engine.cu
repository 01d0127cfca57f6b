// The CUDA engine: DESIGN.md §3 on the GPU in float16 or float32 (T), cuBLAS for the dense
// projections (float32 accumulation), the kernels of kernels/ for everything else (embedding,
// attention, LayerNorm with the residual and bias fused, bias + activation, beam top-k).
//
// Decode steps: one packed H2D upload (step, tokens, parent rows, row -> sentence, running
// scores), the forward pass, log-softmax + top-k on the device, one small D2H copy. A step's
// kernels read the step and the per-row indices from device memory (the optional device
// pointers of kernels/: embed_positions_cuda's step, decoder_self_attention's step and key-row
// table, attention's kv_index), so the whole step is captured once as a CUDA graph per
// (sentence bucket, beam, k, masks, key-row table parity) and replayed; buffers the graphs use
// are persistent and only grow (a growth drops them). The beam reorder moves only the key-row
// table (kernels::beam_reorder_key_rows_cuda), never the KV caches.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/layer_norm.h"
#include "kernels/topk.h"
#include "model/cuda/device_memory.h"
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

// NMT_CUDA_PROFILE=1: the engine measures its decode steps (GPU time between the step's first
// and last operation, host time of step()) and prints the averages when destroyed.
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

template <typename T>
class CudaEngine final : public Engine {
 public:
  CudaEngine(const ModelConfig& c, const Weights& w, const TranslatorOptions& o)
      : c_(c), device_(o.device_index), alloc_(o.device_memory_limit), use_graphs_(graphs_enabled()) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cublas(cublasCreate(&cublas_), "cublasCreate");
    check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
    d_ = c.d_model;
    if (profile_) {
      cudaEventCreate(&ev_start_);
      cudaEventCreate(&ev_end_);
    }
    embed_scale_ = c.scale_embedding ? std::sqrt(float(d_)) : 1.f;
    try {
      init(w);
      warm_up();
    } catch (...) {
      cublasDestroy(cublas_);
      cudaStreamDestroy(stream_);
      throw;
    }
  }

  void init(const Weights& w) {
    if (d_ % c_.encoder_heads || d_ % c_.decoder_heads || d_ % 8 || (d_ / c_.decoder_heads) % 8 ||
        (d_ / c_.encoder_heads) % 8)
      throw Error(ErrorCode::kInvalidArgument,
                  "CUDA engine: d_model and the head size must be multiples of 8");
    for (int heads : {c_.encoder_heads, c_.decoder_heads}) {
      const int hd = d_ / heads;
      if (hd != 32 && hd != 64 && hd != 128)
        throw Error(ErrorCode::kInvalidArgument, "CUDA engine: attention head size " + std::to_string(hd) +
                                                     " (d_model / heads) is not supported: 32, 64 or 128");
    }
    // Our own workspace: counted against the memory limit, and needed for graph capture.
    workspace_ = DeviceBuffer<char>(&alloc_, kCublasWorkspace);
    check_cublas(cublasSetWorkspace(cublas_, workspace_.get(), kCublasWorkspace), "cublasSetWorkspace");
    upload_weights(w);
  }

  // One sentence through encode and a step: CUDA loads kernels lazily and cuBLAS sets up on
  // first use, which made the first batch a server saw take ~190 ms on H100.
  void warm_up() {
    encode({{c_.eos_id}}, 1);
    const std::vector<int> tokens{c_.decoder_start_id};
    const std::vector<float> running{0.f};
    StepInput in;
    in.tokens = &tokens;
    in.running_scores = &running;
    StepOutput out;
    step(in, &out);
    profile_stats_ = StepProfile();
  }

  ~CudaEngine() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (profile_) {
      const StepProfile& p = profile_stats_;
      std::fprintf(stderr,
                   "nmt cuda profile: %ld encodes, %.1f us wall each; %ld steps: GPU %.1f us, "
                   "step() wall %.1f us per step\n",
                   p.encodes, 1e3 * p.encode_wall_ms / std::max(p.encodes, 1L), p.steps,
                   1e3 * p.gpu_ms / std::max(p.steps, 1L), 1e3 * p.step_wall_ms / std::max(p.steps, 1L));
      cudaEventDestroy(ev_start_);
      cudaEventDestroy(ev_end_);
    }
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  int vocab_size() const override { return c_.vocab_size; }
  size_t memory_used() const override { return alloc_.held(); }

  std::vector<float> encoder_output(size_t sentence) const override {
    cudaSetDevice(device_);
    if (sentence >= lengths_.size()) throw Error(ErrorCode::kInvalidArgument, "encoder_output: no such sentence");
    const size_t n = size_t(lengths_[sentence]) * d_;
    std::vector<T> dev(n);
    check_cuda(cudaMemcpyAsync(dev.data(), enc_out_.get() + sentence * size_t(src_len_) * d_,
                               n * sizeof(T), cudaMemcpyDeviceToHost, stream_), "encoder_output copy");
    check_cuda(cudaStreamSynchronize(stream_), "encoder_output sync");
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = float(dev[i]);
    return out;
  }

  void encode(const std::vector<std::vector<int>>& source_ids, int beam) override;
  void step(const StepInput& in, StepOutput* out) override;

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
  // Graph key: sentence bucket, beam, k, mask_eos, force_eos, key-row table parity.
  using GraphKey = std::tuple<int, int, int, bool, bool, int>;

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
    const std::vector<float>& bias = w.output_bias().data;
    out_bias_ = DeviceBuffer<float>(&alloc_, bias.size());
    check_cuda(cudaMemcpy(out_bias_.get(), bias.data(), bias.size() * sizeof(float),
                          cudaMemcpyHostToDevice), "bias upload");
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
  void linear(const T* x, const Dense& L, T* y, int rows) { gemm(x, L.in, L.w, y, L.out, rows, L.out, L.in); }

  // ---------------------------------------------------------------- persistent buffers

  // Grows `buf` to at least n elements; a growth invalidates the captured graphs.
  template <typename U>
  void ensure(DeviceBuffer<U>& buf, size_t n) {
    if (buf.size() >= n) return;
    drop_graphs();
    buf.reset();
    buf = DeviceBuffer<U>(&alloc_, n);
  }
  void drop_graphs() {
    if (graphs_.empty()) return;
    cudaStreamSynchronize(stream_);
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

  int64_t cache_plane() const { return int64_t(rows_cap_) * cache_cap_ * d_; }
  T* cache(int layer, int kv) const { return cache_.get() + (int64_t(layer) * 2 + kv) * cache_plane(); }

  // Room for `rows` decoder rows (KV caches keep their contents only when rows do not grow,
  // which holds within one batch: encode sizes them).
  void ensure_rows(int rows) {
    if (rows <= rows_cap_) return;
    drop_graphs();
    // Release first (lower peak); rows_cap_ stays 0 until everything is allocated, so a
    // failed allocation (kResourceExhausted) leaves a consistent engine that retries later.
    rows_cap_ = 0;
    cache_.reset();
    for (auto& t : key_rows_) t.reset();
    for (auto* b : {&y_, &qkv_, &ctx_, &tmp_, &hidden_}) b->reset();
    logits_.reset();
    step_in_dev_.reset();
    step_out_dev_.reset();
    const int cap = std::min(std::max(cache_cap_, 32), c_.max_positions);
    const size_t cache_elems = size_t(2) * c_.decoder_layers * rows * cap * d_;
    cache_ = DeviceBuffer<T>(&alloc_, cache_elems);
    for (auto& t : key_rows_) t = DeviceBuffer<int>(&alloc_, size_t(rows) * cap);
    y_ = DeviceBuffer<T>(&alloc_, size_t(rows) * d_);
    qkv_ = DeviceBuffer<T>(&alloc_, size_t(rows) * 3 * d_);
    ctx_ = DeviceBuffer<T>(&alloc_, size_t(rows) * d_);
    tmp_ = DeviceBuffer<T>(&alloc_, size_t(rows) * d_);
    hidden_ = DeviceBuffer<T>(&alloc_, size_t(rows) * std::max(c_.decoder_ffn_dim, 1));
    logits_ = DeviceBuffer<float>(&alloc_, size_t(rows) * logits_ld());
    step_in_dev_ = DeviceBuffer<int>(&alloc_, step_in_ints(rows));
    step_out_dev_ = DeviceBuffer<int>(&alloc_, size_t(rows) * 2 * kMaxTopk);
    step_in_.reserve(step_in_ints(rows) * sizeof(int));
    step_out_.reserve(size_t(rows) * 2 * kMaxTopk * sizeof(int));
    cache_cap_ = cap;
    rows_cap_ = rows;
  }
  static size_t step_in_ints(int rows) { return 4 + 4 * size_t(rows); }
  // Row stride of the logits and rows of the output projection: the vocabulary rounded up to
  // 8, so that the GEMM's output dimension and rows are 16-byte aligned (with an odd
  // vocabulary cuBLAS falls back to an unaligned sm75 kernel: on H100 23 us for
  // 256 x 8001 x 256, 243 us for 256 x 58101 x 512). The padding columns are never read.
  int logits_ld() const { return (c_.vocab_size + 7) / 8 * 8; }

  // Doubles the caches' positions (up to max_positions) keeping their contents.
  void grow_cache(int positions) {
    if (positions <= cache_cap_) return;
    int cap = cache_cap_;
    while (cap < positions) cap *= 2;
    cap = std::min(cap, c_.max_positions);
    const int64_t rows = int64_t(2) * c_.decoder_layers * rows_cap_;
    DeviceBuffer<T> next(&alloc_, size_t(rows) * cap * d_);
    DeviceBuffer<int> next_rows(&alloc_, size_t(rows_cap_) * cap), spare(&alloc_, size_t(rows_cap_) * cap);
    drop_graphs();
    check_cuda(cudaMemcpy2DAsync(next.get(), size_t(cap) * d_ * sizeof(T), cache_.get(),
                                 size_t(cache_cap_) * d_ * sizeof(T),
                                 size_t(cache_cap_) * d_ * sizeof(T), rows,
                                 cudaMemcpyDeviceToDevice, stream_), "cache growth");
    check_cuda(cudaMemcpy2DAsync(next_rows.get(), size_t(cap) * sizeof(int), key_rows_[parity_].get(),
                                 size_t(cache_cap_) * sizeof(int), size_t(cache_cap_) * sizeof(int),
                                 rows_cap_, cudaMemcpyDeviceToDevice, stream_), "cache growth");
    cache_ = std::move(next);
    key_rows_[parity_] = std::move(next_rows);
    key_rows_[1 - parity_] = std::move(spare);
    cache_cap_ = cap;
  }

  // ---------------------------------------------------------------- decode step

  // Everything a step enqueues, between the packed upload and the top-k download.
  void enqueue_step(int sentences, int beam, int k, bool mask_eos, bool force_eos) {
    const int rows = sentences * beam;
    const size_t in_ints = step_in_ints(rows);
    check_cuda(cudaMemcpyAsync(step_in_dev_.get(), step_in_.get(), in_ints * sizeof(int),
                               cudaMemcpyHostToDevice, stream_), "step upload");
    const int* dev = step_in_dev_.get();
    const int* step = dev;
    const int* tokens = dev + 4;
    const int* parents = tokens + rows;
    const int* row_sentence = parents + rows;
    const float* running = reinterpret_cast<const float*>(row_sentence + rows);
    // Beam reorder: only the small table of which cache row holds each position moves.
    kernels::beam_reorder_key_rows_cuda(key_rows_[parity_].get(), key_rows_[1 - parity_].get(),
                                        parents, rows, cache_cap_, step, stream_);
    parity_ = 1 - parity_;
    const int d = d_, hd = d_ / c_.decoder_heads;
    T* y = y_.get();
    kernels::embed_positions_cuda<T>(tokens, dec_emb_, dec_pos_, nullptr, y, rows, d, embed_scale_,
                                     stream_, step);
    for (int l = 0; l < c_.decoder_layers; ++l) {
      const DecoderLayer& L = decoder_[size_t(l)];
      linear(y, L.qkv, qkv_.get(), rows);
      kernels::DecoderSelfAttentionArgs<T> self;
      self.qkv = qkv_.get(); self.bias = L.qkv.b;
      self.k_cache = cache(l, 0); self.v_cache = cache(l, 1);
      self.key_rows = key_rows_[parity_].get(); self.step = step;
      self.out = ctx_.get();
      self.rows = rows; self.capacity = cache_cap_; self.heads = c_.decoder_heads; self.head_dim = hd;
      self.scale = 1.f / std::sqrt(float(hd));
      kernels::decoder_self_attention_cuda(self, stream_);
      linear(ctx_.get(), L.out, tmp_.get(), rows);
      layer_norm(tmp_.get(), L.out.b, L.self_norm, y, rows);

      linear(y, L.cross_q, tmp_.get(), rows);
      kernels::AttentionArgs<T> cross;
      cross.q = tmp_.get(); cross.q_bias = L.cross_q.b;
      cross.q_batch_stride = cross.q_row_stride = d;
      cross.k = cross_kv_.get() + int64_t(l) * 2 * d; cross.v = cross.k + d;
      cross.kv_row_stride = int64_t(c_.decoder_layers) * 2 * d;
      cross.kv_batch_stride = int64_t(src_cap_) * cross.kv_row_stride;
      cross.v_bias = L.cross_v_bias;
      cross.kv_index = row_sentence; cross.key_lengths = src_len_dev_.get();
      cross.out = ctx_.get(); cross.out_batch_stride = cross.out_row_stride = d;
      cross.batch = rows; cross.q_len = 1; cross.heads = c_.decoder_heads; cross.head_dim = hd;
      cross.kv_len = src_cap_; cross.scale = self.scale;
      kernels::attention_cuda(cross, stream_);
      linear(ctx_.get(), L.cross_out, tmp_.get(), rows);
      layer_norm(tmp_.get(), L.cross_out.b, L.cross_norm, y, rows);

      feed_forward(L.fc1, L.fc2, L.ffn_norm, y, hidden_.get(), tmp_.get(), rows);
    }
    gemm(y, d, out_proj_, logits_.get(), logits_ld(), rows, logits_ld(), d);
    kernels::TopkMasks masks;
    masks.pad_id = c_.pad_id; masks.eos_id = c_.eos_id;
    masks.mask_eos = mask_eos; masks.force_eos = force_eos;
    float* out_scores = reinterpret_cast<float*>(step_out_dev_.get());
    int* out_index = step_out_dev_.get() + size_t(sentences) * k;
    kernels::beam_topk_cuda<float>(logits_.get(), out_bias_.get(), running, sentences, beam,
                                   c_.vocab_size, k, masks, out_scores, out_index, topk_ws_.get(),
                                   topk_ws_.size(), stream_, logits_ld());
    check_cuda(cudaMemcpyAsync(step_out_.get(), step_out_dev_.get(),
                               size_t(sentences) * k * 2 * sizeof(int), cudaMemcpyDeviceToHost,
                               stream_), "step download");
  }

  // x = LN(x + fc2(act(fc1 x + b1)) + b2), hidden: [rows, ffn] scratch
  void feed_forward(const Dense& fc1, const Dense& fc2, const Norm& n, T* x, T* hidden, T* tmp,
                    int rows) {
    linear(x, fc1, hidden, rows);
    kernels::bias_activation_cuda(hidden, fc1.b, rows, fc1.out, c_.activation, stream_);
    linear(hidden, fc2, tmp, rows);
    layer_norm(tmp, fc2.b, n, x, rows);
  }

  // x = LN(x + y + bias) in place (the residual add and the projection's bias fused).
  void layer_norm(const T* y, const T* bias, const Norm& n, T* x, int rows) {
    kernels::layer_norm_cuda(y, x, bias, n.gamma, n.beta, x, rows, d_, c_.layer_norm_eps, stream_);
  }

  const ModelConfig c_;
  const int device_;
  DeviceAllocator alloc_;  // first member with device memory: destroyed last
  const bool use_graphs_;
  cudaStream_t stream_ = nullptr;
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

  // encoder state of the current batch
  std::vector<int> lengths_;
  int src_len_ = 0;
  int beam_ = 1;
  DeviceBuffer<T> enc_out_;
  PinnedBuffer enc_in_;

  // persistent decode state (sized by capacity; only grows)
  int src_cap_ = 0, sentences_cap_ = 0, rows_cap_ = 0, cache_cap_ = 0;
  DeviceBuffer<T> cross_kv_;      // [sentences_cap, src_cap, L * 2d]
  DeviceBuffer<int> src_len_dev_;  // [sentences_cap]
  DeviceBuffer<T> cache_;         // [L * 2][rows_cap][cap][d]: position j of row r written at step j
  DeviceBuffer<int> key_rows_[2];  // ping-pong [rows_cap][cap]: cache row of each row's position
  int parity_ = 0;
  DeviceBuffer<T> y_, qkv_, ctx_, tmp_, hidden_;
  DeviceBuffer<float> logits_;
  DeviceBuffer<char> topk_ws_;
  DeviceBuffer<int> step_in_dev_, step_out_dev_;
  PinnedBuffer step_in_, step_out_;
  std::vector<int> row_sentence_;  // batch index of each alive row
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<GraphKey> seen_;  // keys run once without a graph
  const bool profile_ = profile_enabled();
  StepProfile profile_stats_;
  cudaEvent_t ev_start_ = nullptr, ev_end_ = nullptr;
};

template <typename T>
void CudaEngine<T>::encode(const std::vector<std::vector<int>>& source_ids, int beam) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const auto wall0 = std::chrono::steady_clock::now();
  const int n = int(source_ids.size());
  lengths_.clear();
  int S = 0;
  for (const auto& s : source_ids) {
    if (s.empty()) throw Error(ErrorCode::kInvalidArgument, "empty source sentence");
    if (int64_t(s.size()) > c_.max_positions)
      throw Error(ErrorCode::kInvalidArgument,
                  "source sentence has " + std::to_string(s.size()) +
                      " tokens, more than the model's " + std::to_string(c_.max_positions) + " positions");
    for (int id : s)
      if (id < 0 || id >= c_.vocab_size)
        throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary");
    lengths_.push_back(int(s.size()));
    S = std::max(S, int(s.size()));
  }
  src_len_ = S;
  beam_ = beam;
  parity_ = 0;
  row_sentence_.resize(size_t(n) * beam);
  for (size_t r = 0; r < row_sentence_.size(); ++r) row_sentence_[r] = int(r / beam);
  if (n == 0) return;

  // Persistent capacities (rounded up so that later batches rarely regrow them).
  const int rows_needed = bucket(n) * beam;
  int src_cap = src_cap_;
  if (S > src_cap) src_cap = std::max(std::min(std::max(src_cap, (S + 31) / 32 * 32), c_.max_positions), S);
  const int sentences_cap = std::max(sentences_cap_, bucket(n));
  if (src_cap != src_cap_) {  // the cross K/V layout moves: graphs read it
    drop_graphs();
    cross_kv_.reset();
  }
  ensure(cross_kv_, size_t(sentences_cap) * src_cap * 2 * c_.decoder_layers * d_);
  ensure(src_len_dev_, size_t(sentences_cap));
  src_cap_ = src_cap;
  sentences_cap_ = sentences_cap;
  ensure_rows(rows_needed);
  size_t ws = 0;
  for (int g = 1; g <= bucket(n); g = bucket(g + 1))
    for (int k = 1; k <= kMaxTopk; k *= 2)
      ws = std::max(ws, kernels::beam_topk_workspace_bytes(g, beam, c_.vocab_size, k));
  ensure(topk_ws_, ws);

  // One upload: padded ids [n, S], their positions [n, S], then the lengths.
  const int d = d_, rows = n * S;
  cudaStreamSynchronize(stream_);  // the pinned buffer may still feed the previous upload
  enc_in_.reserve(size_t(2 * rows + n) * sizeof(int));
  int* host = static_cast<int*>(enc_in_.get());
  for (int s = 0; s < n; ++s) {
    for (int t = 0; t < S; ++t) {
      host[s * S + t] = t < lengths_[size_t(s)] ? source_ids[size_t(s)][size_t(t)] : c_.pad_id;
      host[rows + s * S + t] = t;
    }
    host[2 * rows + s] = lengths_[size_t(s)];
  }
  DeviceBuffer<int> ids(&alloc_, size_t(2 * rows));
  check_cuda(cudaMemcpyAsync(ids.get(), host, size_t(2 * rows) * sizeof(int), cudaMemcpyHostToDevice, stream_), "encode upload");
  check_cuda(cudaMemcpyAsync(src_len_dev_.get(), host + 2 * rows, size_t(n) * sizeof(int), cudaMemcpyHostToDevice, stream_), "encode upload");

  enc_out_.reset();
  enc_out_ = DeviceBuffer<T>(&alloc_, size_t(rows) * d);
  DeviceBuffer<T> qkv(&alloc_, size_t(rows) * 3 * d), ctx(&alloc_, size_t(rows) * d),
      tmp(&alloc_, size_t(rows) * d),
      hidden(&alloc_, size_t(rows) * std::max(c_.encoder_ffn_dim, 1));
  T* x = enc_out_.get();
  kernels::embed_positions_cuda<T>(ids.get(), enc_emb_, enc_pos_, ids.get() + rows, x, rows, d,
                                   embed_scale_, stream_);
  const int hd = d / c_.encoder_heads;
  for (const EncoderLayer& L : encoder_) {
    linear(x, L.qkv, qkv.get(), rows);
    kernels::AttentionArgs<T> a;
    a.q = qkv.get(); a.q_bias = L.qkv.b;
    a.k = qkv.get() + d; a.v = qkv.get() + 2 * d; a.v_bias = L.qkv.b + 2 * d;
    a.q_batch_stride = a.kv_batch_stride = int64_t(S) * 3 * d;
    a.q_row_stride = a.kv_row_stride = 3 * d;
    a.key_lengths = src_len_dev_.get();
    a.out = ctx.get(); a.out_batch_stride = int64_t(S) * d; a.out_row_stride = d;
    a.batch = n; a.q_len = a.kv_len = S; a.heads = c_.encoder_heads; a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    kernels::attention_cuda(a, stream_);
    linear(ctx.get(), L.out, tmp.get(), rows);
    layer_norm(tmp.get(), L.out.b, L.attn_norm, x, rows);
    feed_forward(L.fc1, L.fc2, L.ffn_norm, x, hidden.get(), tmp.get(), rows);
  }
  // Cross-attention K/V of every decoder layer, once per sentence: [n][src_cap][L * 2d].
  const int kv_cols = 2 * c_.decoder_layers * d;
  gemm(x, d, cross_kv_w_, cross_kv_.get(), kv_cols, S, kv_cols, d, n, int64_t(S) * d,
       int64_t(src_cap_) * kv_cols);
  if (profile_) {
    cudaStreamSynchronize(stream_);
    profile_stats_.encodes++;
    profile_stats_.encode_wall_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  }
}

template <typename T>
void CudaEngine<T>::step(const StepInput& in, StepOutput* out) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const auto wall0 = std::chrono::steady_clock::now();
  const int rows = int(in.tokens->size());
  const int beam = in.beam;
  if (beam != beam_ || rows % beam != 0 || rows > int(row_sentence_.size()) ||
      int(in.running_scores->size()) != rows || (in.parent_rows && int(in.parent_rows->size()) != rows))
    throw Error(ErrorCode::kInternal, "CUDA engine step: rows do not match the encoded batch");
  if (in.step >= c_.max_positions)
    throw Error(ErrorCode::kInvalidArgument,
                "decoding past the model's " + std::to_string(c_.max_positions) + " positions");
  if (in.k < 1 || in.k > kMaxTopk || in.k > beam * c_.vocab_size)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: k = " + std::to_string(in.k) +
                                                 " candidates per sentence is not supported");
  const int sentences = rows / beam;
  out->scores.clear();
  out->candidates.clear();
  if (rows == 0) return;
  const int padded = bucket(sentences);
  const int padded_rows = padded * beam;
  ensure_rows(padded_rows);
  grow_cache(in.step + 1);

  // Row -> batch sentence after the reorder; finished sentences are gone.
  std::vector<int> row_sentence(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r)
    row_sentence[size_t(r)] = in.parent_rows ? row_sentence_[size_t((*in.parent_rows)[size_t(r)])] : row_sentence_[size_t(r)];
  row_sentence_.swap(row_sentence);

  // The packed upload; padding rows read row 0's state and their results are ignored.
  int* h = static_cast<int*>(step_in_.get());
  h[0] = in.step;
  h[1] = rows;
  h[2] = h[3] = 0;
  int* tokens = h + 4;
  int* parents = tokens + padded_rows;
  int* sent = parents + padded_rows;
  float* running = reinterpret_cast<float*>(sent + padded_rows);
  for (int r = 0; r < padded_rows; ++r) {
    const bool real = r < rows;
    tokens[r] = real ? (*in.tokens)[size_t(r)] : c_.pad_id;
    if (tokens[r] < 0 || tokens[r] >= c_.vocab_size)
      throw Error(ErrorCode::kInvalidArgument, "token id outside the vocabulary");
    parents[r] = !real ? 0 : in.parent_rows ? (*in.parent_rows)[size_t(r)] : r;
    sent[r] = real ? row_sentence_[size_t(r)] : row_sentence_[0];
    running[r] = real ? (*in.running_scores)[size_t(r)] : 0.f;
  }

  if (profile_) cudaEventRecord(ev_start_, stream_);
  if (use_graphs_) {
    const GraphKey key{padded, beam, in.k, in.mask_eos, in.force_eos, parity_};
    auto it = graphs_.find(key);
    if (it == graphs_.end() && seen_.insert(key).second) {
      // First use of this shape: plain launches (lazy module loading, cuBLAS heuristics);
      // the graph is captured the next time.
      enqueue_step(padded, beam, in.k, in.mask_eos, in.force_eos);
    } else if (it == graphs_.end()) {
      const int parity_before = parity_;
      cudaGraph_t graph = nullptr;
      check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture");
      try {
        enqueue_step(padded, beam, in.k, in.mask_eos, in.force_eos);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        parity_ = parity_before;
        throw;
      }
      check_cuda(cudaStreamEndCapture(stream_, &graph), "graph capture");
      parity_ = parity_before;
      cudaGraphExec_t exec = nullptr;
      const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      check_cuda(status, "cudaGraphInstantiate");
      it = graphs_.emplace(key, exec).first;
    }
    if (it != graphs_.end()) {
      check_cuda(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
      parity_ = 1 - parity_;
    }
  } else {
    enqueue_step(padded, beam, in.k, in.mask_eos, in.force_eos);
  }
  if (profile_) cudaEventRecord(ev_end_, stream_);
  check_cuda(cudaStreamSynchronize(stream_), "decode step");

  const float* scores = static_cast<const float*>(step_out_.get());
  const int* index = static_cast<const int*>(step_out_.get()) + size_t(padded) * in.k;
  out->scores.assign(scores, scores + size_t(sentences) * in.k);
  out->candidates.assign(index, index + size_t(sentences) * in.k);
  if (profile_) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev_start_, ev_end_);
    profile_stats_.steps++;
    profile_stats_.gpu_ms += ms;
    profile_stats_.step_wall_ms +=
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
