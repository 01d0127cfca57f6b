#include "model/model_config.h"

#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/error.h"

namespace nmt {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, source + ": " + what);
}

int int_field(const json& j, const char* key, const std::string& source, int min_value) {
  auto it = j.find(key);
  if (it == j.end()) fail(source, std::string("missing field '") + key + "'");
  if (!it->is_number_integer()) fail(source, std::string("field '") + key + "' must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < min_value || v > (1 << 24)) {
    fail(source, std::string("field '") + key + "' has unsupported value " + std::to_string(v));
  }
  return int(v);
}

int optional_int(const json& j, const char* key, int fallback, const std::string& source) {
  return j.contains(key) && !j[key].is_null() ? int_field(j, key, source, 0) : fallback;
}

bool optional_bool(const json& j, const char* key, bool fallback, const std::string& source) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_boolean()) fail(source, std::string("field '") + key + "' must be true or false");
  return j[key].get<bool>();
}

}  // namespace

ModelConfig ModelConfig::parse(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // syntax errors and out-of-range numbers alike
    fail(source, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) fail(source, "expected a JSON object");
  try {
    return parse_object(j, source);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    fail(source, std::string("invalid field value (") + e.what() + ")");
  }
}

ModelConfig ModelConfig::parse_object(const nlohmann::json& j, const std::string& source) {
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  if (type != "marian") {
    fail(source, "unsupported field 'model_type' = '" + type + "' (only 'marian' is supported)");
  }
  ModelConfig c;
  c.d_model = int_field(j, "d_model", source, 1);
  c.encoder_layers = int_field(j, "encoder_layers", source, 1);
  c.decoder_layers = int_field(j, "decoder_layers", source, 1);
  c.encoder_heads = int_field(j, "encoder_attention_heads", source, 1);
  c.decoder_heads = int_field(j, "decoder_attention_heads", source, 1);
  c.encoder_ffn_dim = int_field(j, "encoder_ffn_dim", source, 1);
  c.decoder_ffn_dim = int_field(j, "decoder_ffn_dim", source, 1);
  c.vocab_size = int_field(j, "vocab_size", source, 2);
  c.share_embeddings = optional_bool(j, "share_encoder_decoder_embeddings", true, source);
  c.tie_output = optional_bool(j, "tie_word_embeddings", true, source);
  // transformers' MarianMTModel sizes the decoder side by decoder_vocab_size only when the
  // embeddings are not shared (it defaults to vocab_size).
  c.target_vocab_size = c.share_embeddings ? c.vocab_size : optional_int(j, "decoder_vocab_size", c.vocab_size, source);
  if (c.target_vocab_size < 2) fail(source, "field 'decoder_vocab_size' has unsupported value " + std::to_string(c.target_vocab_size));
  c.pad_id = int_field(j, "pad_token_id", source, 0);
  c.eos_id = int_field(j, "eos_token_id", source, 0);
  c.decoder_start_id = optional_int(j, "decoder_start_token_id", c.pad_id, source);
  c.max_positions = int_field(j, "max_position_embeddings", source, 1);
  c.scale_embedding = optional_bool(j, "scale_embedding", false, source);
  const std::string act = j.value("activation_function", "");
  if (!kernels::parse_activation(act, &c.activation)) {
    fail(source, "unsupported field 'activation_function' = '" + act +
                     "' (supported: relu, gelu, swish, silu)");
  }
  if (c.d_model % c.encoder_heads != 0) {
    fail(source, "field 'encoder_attention_heads' must divide 'd_model'");
  }
  if (c.d_model % c.decoder_heads != 0) {
    fail(source, "field 'decoder_attention_heads' must divide 'd_model'");
  }
  if (c.d_model % 2 != 0) fail(source, "field 'd_model' must be even (sinusoidal positions)");
  // The decoder's special ids index the target vocabulary.
  for (const char* key : {"pad_token_id", "eos_token_id", "decoder_start_token_id"}) {
    if (j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= c.target_vocab_size) {
      fail(source, std::string("field '") + key + "' is outside the vocabulary");
    }
  }
  // EOS is forced at the length limit with eos_token_id (MarianConfig's default for
  // forced_eos_token_id is 0, the usual EOS id).
  if (j.contains("forced_eos_token_id") && !j["forced_eos_token_id"].is_null() &&
      (!j["forced_eos_token_id"].is_number_integer() || j["forced_eos_token_id"].get<int64_t>() != c.eos_id)) {
    fail(source, "unsupported field 'forced_eos_token_id': only eos_token_id (" + std::to_string(c.eos_id) +
                     ") is supported");
  }
  // Fields of the Bart-era MarianConfig (still in many OPUS-MT config.json files) and of its
  // siblings that describe another architecture than the post-norm, sinusoidal, plain-logits
  // Marian the engines compute. transformers' Marian ignores them; a model trained that way
  // would translate wrongly, so it is refused, every such field named in the one line. Their
  // Marian values are accepted.
  struct Fixed {
    const char* key;
    bool marian_value;
    const char* why;
  };
  std::vector<std::string> refused;
  for (const Fixed& f : {Fixed{"normalize_before", false, "Marian models are post-norm"},
                         Fixed{"add_final_layer_norm", false, "Marian has no final layer norm"},
                         Fixed{"normalize_embedding", false, "Marian has no embedding layer norm"},
                         Fixed{"layernorm_embedding", false, "Marian has no embedding layer norm"},
                         Fixed{"static_position_embeddings", true, "Marian positions are sinusoidal"},
                         Fixed{"add_bias_logits", false, "Marian adds only final_logits_bias"},
                         Fixed{"is_decoder", false, "a decoder-only model"},
                         Fixed{"is_encoder_decoder", true, "Marian is an encoder-decoder"}}) {
    if (j.contains(f.key) && !j[f.key].is_null() && j[f.key] != f.marian_value) {
      refused.push_back(std::string("'") + f.key + "' = " + j[f.key].dump() + " (" + f.why + ")");
    }
  }
  if (!refused.empty()) {
    std::string msg = refused.size() == 1 ? "unsupported field " : "unsupported fields ";
    for (size_t i = 0; i < refused.size(); ++i) msg += (i ? ", " : "") + refused[i];
    fail(source, msg);
  }
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"]) {
      if (a != "MarianMTModel" && a != "MarianModel") {
        fail(source, "unsupported field 'architectures' = " + j["architectures"].dump() +
                         " (only MarianMTModel is supported)");
      }
    }
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot open model config (missing file?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

}  // namespace nmt
