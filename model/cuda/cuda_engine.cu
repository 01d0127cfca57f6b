// The CUDA engine's setup, teardown and Engine entry points (cuda_engine_class.h describes the
// engine); the encoder, the decode step and the persistent state have files of their own.
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/cuda/cuda_engine_class.h"
#include "model/cuda/device/capture_gate.h"
#include "model/cuda/device/device_stream.h"
#include "model/cuda_engine.h"
#include "model/error.h"

namespace nmt {
namespace cuda {
namespace {

bool profile_enabled() {
  const char* v = std::getenv("NMT_CUDA_PROFILE");
  return v && std::string(v) == "1";
}

bool graphs_enabled() {
  const char* v = std::getenv("NMT_CUDA_GRAPHS");
  return !(v && std::string(v) == "0");
}

}  // namespace

template <typename T>
CudaEngine<T>::CudaEngine(const ModelConfig& c, const Weights& w, const TranslatorOptions& o)
    : c_(c), device_(o.device_index), alloc_(o.device_memory_limit), use_graphs_(graphs_enabled()),
      int8_(o.precision == Precision::kInt8 || o.precision == Precision::kFp8),
      e4m3_(o.precision == Precision::kFp8), profile_(profile_enabled()) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  q_.stream = device_stream(device_);
  check_cuda(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cublas(cublasCreate(&q_.cublas), "cublasCreate");
  check_cublas(cublasSetStream(q_.cublas, q_.stream), "cublasSetStream");
  check_cuda(cudaStreamCreateWithFlags(&encode_q_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cublas(cublasCreate(&encode_q_.cublas), "cublasCreate");
  check_cublas(cublasSetStream(encode_q_.cublas, encode_q_.stream), "cublasSetStream");
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

template <typename T>
void CudaEngine<T>::init(const Weights& w) {
  if (d_ % c_.encoder_heads || d_ % c_.decoder_heads || d_ % 8)
    throw Error(ErrorCode::kInvalidArgument, "CUDA engine: d_model must be a multiple of 8 and of the heads");
  for (int heads : {c_.encoder_heads, c_.decoder_heads}) {
    const int hd = d_ / heads;
    if (hd != 4 && hd != 8 && hd != 16 && hd != 32 && hd != 64 && hd != 128)
      throw Error(ErrorCode::kInvalidArgument, "CUDA engine: attention head size " + std::to_string(hd) +
                                                   " (d_model / heads) is not supported: 4, 8, 16, 32, 64 or 128");
  }
  const Architecture& a = c_.arch;
  // A pre-norm stack's output is its final LayerNorm's (Layers::final_norm); post-norm stacks
  // end normalized already. Both families of each order are so; another mix is refused.
  if (a.norm_order == NormOrder::kPre ? !(a.final_encoder_norm && a.final_decoder_norm)
                                      : (a.final_encoder_norm || a.final_decoder_norm))
    throw Error(ErrorCode::kInvalidArgument, std::string("CUDA engine: family ") + family_name(a.family) +
                                                 ": final LayerNorms are computed for pre-norm stacks only, "
                                                 "and needed there");
  // Our own workspace: counted against the memory limit, and needed for graph capture.
  workspace_ = DeviceBuffer<char>(&alloc_, kCublasWorkspace);
  check_cublas(cublasSetWorkspace(q_.cublas, workspace_.get(), kCublasWorkspace), "cublasSetWorkspace");
  encode_workspace_ = DeviceBuffer<char>(&alloc_, kCublasWorkspace);
  check_cublas(cublasSetWorkspace(encode_q_.cublas, encode_workspace_.get(), kCublasWorkspace),
               "cublasSetWorkspace");
  w_.upload(&alloc_, c_, w, logits_ld(), int8_,
            e4m3_ ? kernels::WeightBytes::kE4m3 : kernels::WeightBytes::kInt8);
  if (int8_) {
    // 16 MB a queue (8M float16 weights): each projection of NLLB-600M's and 1.3B's layers in
    // one chunk, their 256k x 1024 output projection in 32.
    const int64_t elements = int64_t(8) << 20;
    int8_scratch_ = DeviceBuffer<__half>(&alloc_, size_t(elements));
    encode_int8_scratch_ = DeviceBuffer<__half>(&alloc_, size_t(elements));
    q_.int8_scratch = int8_scratch_.get();
    encode_q_.int8_scratch = encode_int8_scratch_.get();
    q_.int8_scratch_elements = encode_q_.int8_scratch_elements = elements;
  }
  // The host adds final_logits_bias to the logits a sampling group gets (StepOutput::logits),
  // as the top-k kernel adds it on the device.
  if (!w.output_bias_is_zero()) output_bias_host_ = w.output_bias().data;
}

// One sentence through encode and a step: CUDA loads kernels lazily and cuBLAS sets up on
// first use, which made the first batch a server saw take ~190 ms on H100. The caller's
// reserve() grows the small capacity this takes.
template <typename T>
void CudaEngine<T>::warm_up() {
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
  release(0, {0});
  profile_stats_ = StepProfile();
}

template <typename T>
CudaEngine<T>::~CudaEngine() {
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
template <typename T>
void CudaEngine<T>::release_handles() {
  const DeviceWideScope scope;  // cublasDestroy synchronizes (device/capture_gate.h)
  cublasDestroy(q_.cublas);
  cublasDestroy(encode_q_.cublas);
  cudaEventDestroy(enc_uploaded_);
  cudaEventDestroy(before_encode_);
  cudaEventDestroy(encoded_);
  cudaStreamDestroy(encode_q_.stream);
  cudaEventDestroy(done_);
  for (StepLane& lane : lanes_) cudaEventDestroy(lane.stepped);
  cudaStreamDestroy(capture_stream_);
}

template <typename T>
cudaError_t CudaEngine<T>::finish() const noexcept {
  cudaError_t status = cudaEventRecord(done_, q_.stream);
  if (status == cudaSuccess) status = cudaEventSynchronize(done_);
  return status != cudaSuccess ? status : cudaEventSynchronize(encoded_);
}

template <typename T>
void CudaEngine<T>::wait(const char* what) const {
  check_cuda(finish(), what);
}

template <typename T>
std::vector<float> CudaEngine<T>::encoder_output(size_t sentence) const {
  cudaSetDevice(device_);
  if (sentence >= enc_lengths_.size()) throw Error(ErrorCode::kInvalidArgument, "encoder_output: no such sentence");
  const size_t n = size_t(enc_lengths_[sentence]) * d_;
  const T* src = enc_.x[0].get() + sentence * enc_len_ * d_;
  std::vector<T> dev(n);
  check_cuda(cudaStreamWaitEvent(q_.stream, encoded_, 0), "encoder_output");
  check_cuda(cudaMemcpyAsync(dev.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, q_.stream),
             "encoder_output copy");
  wait("encoder_output sync");
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float(dev[i]);
  return out;
}

template <typename T>
void CudaEngine<T>::reserve(const EngineCapacity& want) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const EngineCapacity next{std::max(cap_.sentences, want.sentences), std::max(cap_.rows, want.rows),
                            std::max(cap_.source_tokens, want.source_tokens)};
  if (next.sentences == cap_.sentences && next.rows == cap_.rows && next.source_tokens == cap_.source_tokens)
    return;
  const EngineCapacity previous = cap_;
  drop_graphs();
  wait("reserve");  // an encode may still write the slots being released
  // Release first (lower peak); when the new state does not fit, the previous one again (the
  // memory it held a moment ago), so the engine stays usable.
  state_ = DecodeState<T>();
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
  check_cuda(cudaEventRecord(before_encode_, q_.stream), "encode");
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
      check_cuda(cudaEventRecord(before_encode_, q_.stream), "encode");
      enqueue_encode(*in.encode);
    }
    return;
  }
  StepShape shape = shape_of(in.groups);
  shape.edits = has_edits(in);
  if (shape.rows > padded_rows_cap_)  // cannot happen: check_step bounds the rows by cap_.rows
    throw Error(ErrorCode::kInternal, "CUDA engine step: padded rows exceed the step buffers");
  int last_position = 0;
  for (const StepGroup& g : in.groups) last_position = std::max(last_position, g.position);
  trim_memory();
  grow_cache(last_position + 1);
  grow_step_buffers(shape.rows);
  if (shape.edits && !state_.history.get()) {  // repetition controls: a token per cache token
    const int64_t row_blocks = (c_.max_positions + kBlockPositions - 1) / kBlockPositions;
    state_.history = DeviceBuffer<int>(&alloc_, size_t(cap_.rows * row_blocks + 1) * kBlockPositions);
  }
  fill_upload(in, shape, lane);  // the lane's previous step has been waited for

  join_encode();  // the last encode's sentences may step now
  if (in.encode) check_cuda(cudaEventRecord(before_encode_, q_.stream), "encode");
  if (profile_) cudaEventRecord(lane.start, q_.stream);
  launch_step(shape, in.groups, lane_index);
  enqueue_logits_download(in, shape, lane);
  if (profile_) cudaEventRecord(lane.end, q_.stream);
  check_cuda(cudaEventRecord(lane.stepped, q_.stream), "decode step");
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
  out->alignments.clear();
  out->logits.clear();
  if (!lane.in_flight) return;
  const auto wall0 = std::chrono::steady_clock::now();
  lane.in_flight = false;
  check_cuda(cudaEventSynchronize(lane.stepped), "decode step");
  collect_output(lane.pending, lane, out);
  collect_logits(lane, out);
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

template class CudaEngine<float>;
template class CudaEngine<__half>;

}  // namespace cuda

std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& config, const Weights& weights,
                                         const TranslatorOptions& options) {
  const int n = cuda_device_count();
  if (n == 0) throw Error(ErrorCode::kInvalidArgument, "device 'cuda' requested, but no CUDA device is visible");
  if (options.device_index < 0 || options.device_index >= n)
    throw Error(ErrorCode::kInvalidArgument, "device_index " + std::to_string(options.device_index) +
                                                 " is out of range: " + std::to_string(n) +
                                                 " CUDA device(s) visible");
  if (options.precision == Precision::kInt8 || options.precision == Precision::kFp8) {
    // int8 where the GEMV's mma.m16n8k16 runs (8.0+), fp8 where e4m3 converts and multiplies
    // in hardware (8.9+): docs/kernels.md, "Int8 weights".
    const bool fp8 = options.precision == Precision::kFp8;
    cudaDeviceProp p{};
    cuda::check_cuda(cudaGetDeviceProperties(&p, options.device_index), "cudaGetDeviceProperties");
    if (fp8 ? !cuda_fp8_supported(p.major, p.minor) : !cuda_int8_supported(p.major, p.minor))
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("precision ") + (fp8 ? "fp8" : "int8") + " on CUDA needs compute capability " +
                      (fp8 ? "8.9" : "8.0") + " or newer; device " + std::to_string(options.device_index) + " (" +
                      p.name + ") is " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                      (fp8 ? ": use precision int8 or float16" : ": use precision float16, or device cpu"));
  }
  if (options.precision != Precision::kFloat32)
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
