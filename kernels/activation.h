#pragma once
// Activation functions of the feed-forward block, fused with the fc1 bias add.
#include <cstdint>
#include <string>

#include "kernels/stream.h"

namespace nmt::kernels {

enum class Activation { kRelu, kGelu, kSwish };

// Parses a Hugging Face `activation_function` value ("relu", "gelu", "swish"/"silu").
// Returns false for anything else so that the caller can name the offending field.
bool parse_activation(const std::string& name, Activation* out);

// x[r, c] = act(x[r, c] + bias[c]) in place; bias may be null.
void bias_activation_cpu(float* x, const float* bias, int64_t rows, int64_t cols, Activation act);

#if NMT_WITH_CUDA
template <typename T>
void bias_activation_cuda(T* x, const T* bias, int64_t rows, int64_t cols, Activation act,
                          cudaStream_t stream);
#endif

}  // namespace nmt::kernels
