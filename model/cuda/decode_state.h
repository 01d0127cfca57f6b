#pragma once
// The CUDA engine's persistent buffers: the decode state reserve() sizes (slot tables, the
// pools of cross-attention and self-attention keys/values, key-row tables, step buffers), a
// step lane's pinned buffers, and the encoder's buffers. The captured graphs point into them:
// they change only where the engine drops its graphs; the pools (DevicePool) grow and shrink
// with use without moving (docs/data-flow.md, "Decode-state memory").
#include <cuda_runtime.h>

#include <vector>

#include "model/cuda/device/device_memory.h"
#include "model/cuda/device/device_pool.h"
#include "model/cuda/step_layout.h"
#include "model/decoding/token_allocator.h"

namespace nmt::cuda {

// The rows each sentence of a step goes on with (kernels::NextRows), [rows] each.
struct NextRowBuffers {
  DeviceBuffer<int> tokens, parents;
  DeviceBuffer<float> running;
};

// A step buffer of up to `most` rows of `cols` elements of E, backed for the rows in use.
template <typename E>
struct StepBuffer {
  DevicePool pool;
  size_t row_bytes = 0;
  E* get() const { return reinterpret_cast<E*>(pool.get()); }
};

// Self-attention keys/values come in blocks of this many positions of one cache row: a row
// holds ceil((position + 1) / kBlockPositions) blocks, at most kBlockPositions - 1 positions
// more than it uses.
constexpr int kBlockPositions = 16;

// Everything reserve() sizes.
template <typename T>
struct DecodeState {
  // [tokens][L * 2d]: K | V of each layer of a source token; slot s holds the range
  // [slot_start[s], slot_start[s] + slot_tokens[s]) (cross_tokens), as encode() admits it
  DevicePool cross_kv;
  RangeAllocator cross_tokens;
  std::vector<int64_t> slot_start, slot_tokens;  // [sentences]; slot_tokens 0: none held
  // [2][sentences + 1]: each slot's source length, then its first token; the last slot is
  // the padding rows' (no keys), never the loop's
  DeviceBuffer<int> slot_table;
  // [tokens][L * 2][d]: K and V of each layer of a cache token, in blocks of kBlockPositions
  // tokens (blocks); row_blocks[c]: cache row c's blocks, for its positions in order. The
  // scratch row (cap_.rows) holds block 0 for good.
  DevicePool cache;
  BlockAllocator blocks;
  std::vector<std::vector<int64_t>> row_blocks;
  DeviceBuffer<int> key_rows[2];   // ping-pong [rows + 1][cache_cap]: cache token of a position
  NextRowBuffers next_rows[2];     // ping-pong: a step follows the other parity's, writes its own
  DeviceBuffer<float> running;     // [padded rows]: the step's running scores, for its top-k
  // [padded rows][d (Residual's pair), 3d, d, d, ffn], [padded rows][logits_ld()], the top-k's
  // scratch: backed for the rows of the steps in flight (step_rows of them at least)
  StepBuffer<T> y[2], qkv, ctx, tmp, hidden;
  StepBuffer<float> logits;
  StepBuffer<char> topk_ws;
  std::vector<size_t> topk_bytes;  // [padded rows + 1]: the top-k scratch of a step of r rows
  int step_rows = 0;
  DeviceBuffer<char> step_in;  // the upload, copied by the step's first launch
  // Repetition controls on the device (kernels::DeviceHistory): the token fed at each cache
  // token, [cache tokens]; allocated by the first step with token edits (a step without
  // any never reads it).
  DeviceBuffer<int> history;
};

// Where StepLane::alignment's argmax ints start after the flag bytes of `rows` padded rows.
inline size_t alignment_argmax_offset(int rows) { return (size_t(rows) + 15) / 16 * 16; }

// What a lane's step in flight needs until it is collected (Engine::submit()).
struct StepLane {
  PinnedBuffer in, out;  // its packed upload and the top-k download
  // return_alignments (mapped, as in and out): [padded rows] flag bytes (the row's sentence
  // asks), then at alignment_argmax_offset() the kernel's [padded rows] argmax source positions.
  PinnedBuffer alignment;
  // Repetition controls: the token edits' table (kernels::TokenEditTable, at a fixed address
  // the graphs read) and the arrays it points to (grown as a step needs: [padded rows + 1]
  // offsets, [padded rows] n-gram sizes and penalties (the device's controls), then tokens,
  // then factors).
  PinnedBuffer edit_table, edit_data;
  cudaEvent_t stepped = nullptr;  // the end of its step's own work (not a riding encode)
  cudaEvent_t start = nullptr, end = nullptr;  // NMT_CUDA_PROFILE's
  StepShape pending;       // of the step in flight
  bool in_flight = false;  // a step to collect (an encode-only submit leaves none)
  double submit_wall_ms = 0;
  // Sampling groups' rows' logits (StepGroup::return_logits), copied from the device after
  // the step's graph, in group order; logits_floats of them (0: none).
  PinnedBuffer logits;
  size_t logits_floats = 0;
};

// What an encode of up to `sentences` sentences and `rows` token rows runs on.
template <typename T>
struct EncodeBuffers {
  int sentences = 0, rows = 0;
  DeviceBuffer<char> in;                        // EncodeUpload's device part
  DeviceBuffer<T> x[2], qkv, ctx, tmp, hidden;  // [rows][d (Residual's pair), 3d, d, d, ffn]
};

}  // namespace nmt::cuda
