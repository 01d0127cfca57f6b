#pragma once
// The CUDA engine's weights on the device in T (float or __half), laid out for its kernels:
// each attention's Q/K/V projections as one [3d, d] matrix, every decoder layer's cross K/V
// projections as one [L * 2d, d] matrix (one GEMM an encode), the output projection padded
// with zero rows to the logits' stride, and the family's extra LayerNorms (Architecture).
// With int8 (T __half only) every projection of the layers and the output projection hold
// int8 weights with per-row scales instead (kernels/quantize.h), quantized here at upload;
// precision fp8 the same with e4m3 bytes, its output projection float16. The LayerNorms, the
// biases and the cross K/V projections (computed once an encode, not a step) stay float16, and
// so do the embeddings except a table tied to the output projection in int8, which reads its
// int8 rows. docs/kernels.md, "Int8 weights".
#include <map>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "kernels/quantize.h"
#include "model/cuda/device/device_memory.h"

namespace nmt::cuda {

template <typename T>
struct Dense {  // y = x W^T (+ b fused elsewhere)
  const T* w = nullptr;  // null with int8 weights
  const T* b = nullptr;
  int out = 0, in = 0;
  const int8_t* q = nullptr;     // int8: W ~ q * scale, [out, in]
  const float* scale = nullptr;  // int8: [out]
  // What the bytes of q are: int8, or e4m3 (precision fp8).
  kernels::WeightBytes bytes = kernels::WeightBytes::kInt8;
};

template <typename T>
struct Norm {
  const T* gamma = nullptr;
  const T* beta = nullptr;
};

template <typename T>
struct EncoderLayer {
  Dense<T> qkv, out, fc1, fc2;
  Norm<T> attn_norm, ffn_norm;
};

template <typename T>
struct DecoderLayer {
  Dense<T> qkv, out, cross_q, cross_out, fc1, fc2;
  const T* cross_v_bias = nullptr;
  Norm<T> self_norm, cross_norm, ffn_norm;
};

template <typename T>
class DeviceWeights {
 public:
  // Uploads what the engine reads of `w` (synchronously). logits_ld: the output projection's
  // rows once padded.
  // int8: the projections quantized per row, as int8 or (bytes kE4m3, precision fp8: the
  // layers', the output projection float16) e4m3.
  void upload(DeviceAllocator* alloc, const ModelConfig& c, const Weights& w, int logits_ld, bool int8 = false,
              kernels::WeightBytes bytes = kernels::WeightBytes::kInt8);

  std::vector<EncoderLayer<T>> encoder;
  std::vector<DecoderLayer<T>> decoder;
  const T* cross_kv = nullptr;  // [L * 2d, d]: K | V of each decoder layer
  const T *encoder_embeddings = nullptr, *decoder_embeddings = nullptr;
  // In int8 an embedding table tied to the output projection is that projection's int8 rows and
  // scales (the lookup dequantizes a row: kernels/elementwise.h), its float16 pointer above null.
  const int8_t *encoder_embeddings_q = nullptr, *decoder_embeddings_q = nullptr;
  const float *encoder_embeddings_scale = nullptr, *decoder_embeddings_scale = nullptr;
  Dense<T> output_projection;  // [logits_ld, d], no bias (output_bias is the top-k's)
  // [max_positions, d]; with Architecture::pad_position_zero the encoder's has a zero row at
  // index zero_position_row after them, which a source <pad> token's position names (the
  // decoder step leaves a <pad> token's position out: RowEmbedding::zero_position_token).
  const T *encoder_positions = nullptr, *decoder_positions = nullptr;
  int zero_position_row = -1;
  DeviceBuffer<float> output_bias;  // empty: zero (the top-k then reads none)
  // Architecture's extra norms; gamma null where the family has none.
  Norm<T> encoder_embedding_norm, decoder_embedding_norm, encoder_final_norm, decoder_final_norm;

 private:
  const T* upload(const std::vector<float>& host);
  const T* upload(const HostTensor& t);
  // A projection W [out, in] as T, or as int8 with its scales (int8_).
  Dense<T> projection(const std::vector<float>& w, int out, int in, const T* bias);
  Dense<T> dense(const Weights& w, const std::string& prefix);
  Dense<T> fused_qkv(const Weights& w, const std::string& prefix);
  Norm<T> norm(const Weights& w, const std::string& prefix);
  const T* encoder_table(const HostTensor& table, bool zero_row);

  DeviceAllocator* alloc_ = nullptr;
  bool int8_ = false;
  kernels::WeightBytes bytes_ = kernels::WeightBytes::kInt8;
  std::vector<DeviceBuffer<T>> buffers_;
  std::vector<DeviceBuffer<int8_t>> q_buffers_;
  std::vector<DeviceBuffer<float>> scale_buffers_;
  std::map<const HostTensor*, const T*> uploaded_;  // tied tensors are uploaded once
};

}  // namespace nmt::cuda
