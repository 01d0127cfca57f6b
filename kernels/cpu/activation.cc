#include "kernels/activation.h"

#include <cmath>

namespace nmt::kernels {

bool parse_activation(const std::string& name, Activation* out) {
  if (name == "relu") {
    *out = Activation::kRelu;
  } else if (name == "gelu") {
    *out = Activation::kGelu;
  } else if (name == "swish" || name == "silu") {
    *out = Activation::kSwish;
  } else {
    return false;
  }
  return true;
}

namespace {
inline float apply(float v, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return v > 0.f ? v : 0.f;
    case Activation::kGelu:  // exact (erf) GELU, as transformers' "gelu"
      return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
    case Activation::kSwish:
      return v / (1.f + std::exp(-v));
  }
  return v;
}
}  // namespace

void bias_activation_cpu(float* x, const float* bias, int64_t rows, int64_t cols, Activation act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] = apply(row[c] + (bias ? bias[c] : 0.f), act);
  }
}

}  // namespace nmt::kernels
