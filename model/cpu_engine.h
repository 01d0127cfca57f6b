#pragma once
// Factory of the float32 CPU engine (model/cpu/): oneDNN GEMMs, incremental decoding with a
// self-attention KV cache, cross-attention keys/values computed once per sentence.
#include <cstddef>
#include <memory>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/decoding/engine.h"

namespace nmt {

// memory_limit: bytes of decode state (the blocks of cross-attention keys/values and caches,
// model/cpu/kv_state.h) the engine may hold at once; a step or encode that would take more
// throws kResourceExhausted before it changes anything, and so does reserve() where the cap
// cannot hold one sentence of the longest source. 0 = no cap.
// threads: cores its GEMMs and row loops use inside each step (OpenMP); 0 = all.
// int8: every linear layer (and the output projection) multiplies int8 weights quantized
// per row at construction, activations quantized per row on the fly (cpu::int8_linear).
// An engine that holds no sentence keeps its step buffers (activations, logits) up to this
// size, for the next batch: beyond it they go with the last sentence.
constexpr size_t kCpuKeptStepBufferBytes = size_t(16) << 20;

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& config, const Weights& weights,
                                        size_t memory_limit = 0, int threads = 0, bool int8 = false);

}  // namespace nmt
