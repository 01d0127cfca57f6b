#pragma once
// Factory of the float32 CPU engine (model/cpu/): OpenBLAS GEMMs, incremental decoding with a
// self-attention KV cache, cross-attention keys/values computed once per sentence.
#include <memory>

#include "model/engine.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace nmt {

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& config, const Weights& weights);

}  // namespace nmt
