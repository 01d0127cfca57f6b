#pragma once
// A model's settings read from its config.json (and generation_config.json): Marian, M2M-100 /
// NLLB-200 (model_type m2m_100) and mBART-50 (mbart).
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kernels/activation.h"
#include "model/config/architecture.h"

namespace nmt {

struct ModelConfig {
  Architecture arch;  // the family's layer order, norms and positions (model_type)
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
  // The model's default first target token (forced_bos_token_id: the target language of
  // M2M-100 / NLLB / mBART-50 models); -1 none. DecodeOptions::forced_bos_id overrides it.
  int forced_bos_id = -1;
  // Whether generate() bans <pad> (bad_words_ids [[pad_token_id]]): always for Marian (its
  // generation config does), for the other families only where generation_config.json says
  // so. The engines' top-k masks pad_id only when this is true.
  bool mask_pad = true;
  // Whether EOS is forced at the maximum length (forced_eos_token_id = eos_token_id; Marian's
  // and mBART-50's default). Without it a hypothesis at the maximum length ends with the
  // token it chose, as transformers' generate() leaves it.
  bool forced_eos = true;

  // Parses config.json text (and generation_config.json's, "" when the model has none, as
  // transformers' generate() then takes the generation settings from config.json); `source`
  // and `generation_source` name the files in error messages. Throws nmt::Error naming the
  // file and field for unknown model types, missing fields and values the engines do not
  // compute as transformers would: for Marian the Bart-era fields that would describe another
  // architecture (normalize_before: true, static_position_embeddings: false, ...), for
  // M2M-100 and mBART those that contradict the family (normalize_before: false, ...) and the
  // generation settings no engine applies (bad_words_ids other than [[pad]], ...).
  static ModelConfig parse(const std::string& json_text, const std::string& source,
                           const std::string& generation_text = "", const std::string& generation_source = "");
  static ModelConfig load(const std::string& model_dir);

 private:
  static ModelConfig parse_object(const nlohmann::json& j, const std::string& source, const nlohmann::json& gen,
                                  const std::string& generation_source);
};

}  // namespace nmt
