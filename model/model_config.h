#pragma once
// The Marian settings read from a model's config.json.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kernels/activation.h"

namespace nmt {

struct ModelConfig {
  int d_model = 0;
  int encoder_layers = 0;
  int decoder_layers = 0;
  int encoder_heads = 0;
  int decoder_heads = 0;
  int encoder_ffn_dim = 0;
  int decoder_ffn_dim = 0;
  kernels::Activation activation = kernels::Activation::kSwish;
  int vocab_size = 0;         // source side: encoder embeddings and vocab.json
  int target_vocab_size = 0;  // decoder embeddings and output projection: vocab_size unless
                              // share_encoder_decoder_embeddings is false (decoder_vocab_size)
  bool share_embeddings = true;  // share_encoder_decoder_embeddings
  bool tie_output = true;        // tie_word_embeddings: lm_head is the decoder embeddings
  int pad_id = 0;
  int eos_id = 0;
  int decoder_start_id = 0;
  bool scale_embedding = true;
  int max_positions = 0;
  float layer_norm_eps = 1e-5f;

  // Parses config.json text; `source` names the file in error messages. Throws nmt::Error
  // naming the field for unknown model types, missing fields and unsupported values, and for
  // the Bart-era fields that would describe another architecture (normalize_before: true,
  // static_position_embeddings: false, ...): refused rather than computed as Marian.
  static ModelConfig parse(const std::string& json_text, const std::string& source);
  static ModelConfig load(const std::string& model_dir);

 private:
  static ModelConfig parse_object(const nlohmann::json& j, const std::string& source);
};

}  // namespace nmt
