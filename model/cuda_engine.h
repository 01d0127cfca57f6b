#pragma once
// Factory of the CUDA engine (model/cuda/). In a CPU-only build it throws nmt::Error saying so.
// The engine uploads what it needs: `weights` may be freed once the factory returns.
#include <memory>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/decoding/engine.h"
#include "model/translator.h"

namespace nmt {

std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& config, const Weights& weights,
                                         const TranslatorOptions& options);
int cuda_device_count();  // 0 in a CPU-only build or without a visible device

// Whether precision int8 runs on a GPU of this compute capability: 8.0 or newer (its GEMV
// multiplies on the tensor cores with mma.m16n8k16, kernels/quantize.h).
inline bool cuda_int8_supported(int major, [[maybe_unused]] int minor) { return major >= 8; }
// precision fp8 (e4m3 weights): the e4m3 conversions and FP8 tensor cores of compute capability 8.9+.
inline bool cuda_fp8_supported(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

}  // namespace nmt
