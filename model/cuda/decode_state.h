#pragma once
// The CUDA engine's persistent buffers: the decode state reserve() sizes (slots, KV caches,
// key-row tables, step buffers), a step lane's pinned buffers, and the encoder's buffers.
// The captured graphs point into them: they change only where the engine drops its graphs.
#include <cuda_runtime.h>

#include "model/cuda/device/device_memory.h"
#include "model/cuda/step_layout.h"

namespace nmt::cuda {

// The rows each sentence of a step goes on with (kernels::NextRows), [rows] each.
struct NextRowBuffers {
  DeviceBuffer<int> tokens, parents;
  DeviceBuffer<float> running;
};

// Everything reserve() sizes.
template <typename T>
struct DecodeState {
  DeviceBuffer<T> cross_kv;        // [sentences][source_tokens][L * 2d]: K | V of each layer
  DeviceBuffer<int> slot_lengths;  // [sentences]: source length of each slot
  DeviceBuffer<T> cache;           // [L * 2][rows + 1][cache_cap][d]
  DeviceBuffer<int> key_rows[2];   // ping-pong [rows + 1][cache_cap]: cache row of a position
  NextRowBuffers next_rows[2];     // ping-pong: a step follows the other parity's, writes its own
  DeviceBuffer<float> running;     // [padded rows]: the step's running scores, for its top-k
  DeviceBuffer<T> y[2], qkv, ctx, tmp, hidden;  // [padded rows][d (Residual's pair), 3d, d, d, ffn]
  DeviceBuffer<float> logits;                   // [padded rows][logits_ld()]
  DeviceBuffer<char> topk_ws, step_in;  // step_in: the upload, copied by the step's first launch
};

// What a lane's step in flight needs until it is collected (Engine::submit()).
struct StepLane {
  PinnedBuffer in, out;  // its packed upload and the top-k download
  cudaEvent_t stepped = nullptr;  // the end of its step's own work (not a riding encode)
  cudaEvent_t start = nullptr, end = nullptr;  // NMT_CUDA_PROFILE's
  StepShape pending;       // of the step in flight
  bool in_flight = false;  // a step to collect (an encode-only submit leaves none)
  double submit_wall_ms = 0;
};

// What an encode of up to `sentences` sentences and `rows` token rows runs on.
template <typename T>
struct EncodeBuffers {
  int sentences = 0, rows = 0;
  DeviceBuffer<char> in;                        // EncodeUpload's device part
  DeviceBuffer<T> x[2], qkv, ctx, tmp, hidden;  // [rows][d (Residual's pair), 3d, d, d, ffn]
};

}  // namespace nmt::cuda
