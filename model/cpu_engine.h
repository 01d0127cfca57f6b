#pragma once
// Factory of the float32 CPU engine (model/cpu/): OpenBLAS GEMMs, incremental decoding with a
// self-attention KV cache, cross-attention keys/values computed once per sentence.
#include <cstddef>
#include <memory>

#include "model/engine.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace nmt {

// memory_limit: bytes of persistent decode state (cross-attention keys/values, caches) the
// engine may hold; over it reserve() or a cache growth throws kResourceExhausted. 0 = no cap.
std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& config, const Weights& weights,
                                        size_t memory_limit = 0);

}  // namespace nmt
