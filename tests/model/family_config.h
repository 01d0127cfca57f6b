#pragma once
// The tiny M2M-100 / NLLB and mBART configs the family tests start from
// (test_family_config.cc, test_family_engine.cc).
#include <string>

#include <nlohmann/json.hpp>

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

namespace nmt::test {

// A config.json as transformers 5.17 writes it for a tiny M2M-100 / NLLB or mBART model.
inline nlohmann::json family_config(const std::string& model_type) {
  const bool m2m = model_type == "m2m_100";
  return nlohmann::json{{"model_type", model_type},
                        {"architectures", {m2m ? "M2M100ForConditionalGeneration" : "MBartForConditionalGeneration"}},
                        {"d_model", 8},
                        {"encoder_layers", 1},
                        {"decoder_layers", 1},
                        {"encoder_attention_heads", 2},
                        {"decoder_attention_heads", 2},
                        {"encoder_ffn_dim", 12},
                        {"decoder_ffn_dim", 12},
                        {"vocab_size", 20},
                        {"max_position_embeddings", 16},
                        {"activation_function", m2m ? "relu" : "gelu"},
                        {"scale_embedding", true},
                        {"pad_token_id", 1},
                        {"bos_token_id", 0},
                        {"eos_token_id", 2},
                        {"decoder_start_token_id", 2},
                        {"is_encoder_decoder", true},
                        {"tie_word_embeddings", true}};
}

}  // namespace nmt::test
