#pragma once
// Model weights held on the host in float32, whatever their stored dtype, under their
// Hugging Face names. Engines read them from here and upload or use them as they need.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config/model_config.h"

namespace nmt {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const;
};

class Weights {
 public:
  // Loads model.safetensors from model_dir and checks every tensor the config implies
  // (names, shapes). Tied embeddings and absent sinusoidal positions are resolved here.
  static Weights load(const std::string& model_dir, const ModelConfig& config);

  // Throws nmt::Error(kNotFound) naming the tensor and file when absent.
  const HostTensor& get(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(resolve(name)) > 0; }
  // Host bytes of the tensors held (tied tensors counted once).
  size_t bytes() const;

  // Resolved shared tensors (always present after load):
  const HostTensor& encoder_embeddings() const { return get(kEncoderEmbeddings); }
  const HostTensor& decoder_embeddings() const { return get(kDecoderEmbeddings); }
  const HostTensor& output_projection() const { return get(kOutputProjection); }  // [vocab, d]
  const HostTensor& output_bias() const { return get(kOutputBias); }              // [vocab]
  // Marian's final_logits_bias is zeros (trained OPUS-MT models included): the engines then add
  // none, which spares a read of the bias per logit.
  bool output_bias_is_zero() const;
  // Position tables indexed by the engine's position p (p = 0: the first token), [max_pos, d]:
  // the family's offset (Architecture::position_offset) is applied here. Marian's and
  // M2M-100's are computed, mBART's loaded (model.{encoder,decoder}.embed_positions.weight).
  // A <pad> token's position vector where Architecture::pad_position_zero is set is zeros
  // (the engines do not read these tables for it).
  const HostTensor& encoder_positions() const { return get(kEncoderPositions); }
  const HostTensor& decoder_positions() const { return get(kDecoderPositions); }

  static constexpr const char* kEncoderEmbeddings = "nmt.encoder_embeddings";
  static constexpr const char* kDecoderEmbeddings = "nmt.decoder_embeddings";
  static constexpr const char* kOutputProjection = "nmt.output_projection";
  static constexpr const char* kOutputBias = "nmt.output_bias";
  static constexpr const char* kEncoderPositions = "nmt.encoder_positions";
  static constexpr const char* kDecoderPositions = "nmt.decoder_positions";
  // The pre-norm families' extra norms (Architecture), + ".weight" / ".bias".
  static constexpr const char* kEncoderFinalNorm = "model.encoder.layer_norm";
  static constexpr const char* kDecoderFinalNorm = "model.decoder.layer_norm";
  static constexpr const char* kEncoderEmbeddingNorm = "model.encoder.layernorm_embedding";
  static constexpr const char* kDecoderEmbeddingNorm = "model.decoder.layernorm_embedding";

  // Marian's sinusoidal table: sines of the even-index frequencies in the first half of each
  // vector, cosines of the odd-index ones in the second half; positions start at 0.
  static HostTensor sinusoidal_positions(int positions, int dim);
  // fairseq's table (M2M-100 / NLLB), rows for the engine's positions 0..positions-1, i.e.
  // fairseq's positions offset..offset+positions-1: sines in the first half, cosines in the
  // second, frequency exp(-j * ln(10000) / (dim/2 - 1)), computed in float32 as torch does.
  static HostTensor fairseq_sinusoidal_positions(int positions, int dim, int offset);

 private:
  const std::string& resolve(const std::string& name) const;
  std::map<std::string, HostTensor> tensors_;
  // Tied tensors are stored once: the resolved names above may point at another entry.
  std::map<std::string, std::string> aliases_;
  std::string file_;
};

// Per-layer tensor names, so engines do not spell them out.
std::string layer_prefix(bool decoder, int layer);  // "model.decoder.layers.N."

}  // namespace nmt
