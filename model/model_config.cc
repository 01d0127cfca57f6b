#include "model/model_config.h"

#include <fstream>
#include <sstream>

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
  for (const char* key : {"pad_token_id", "eos_token_id", "decoder_start_token_id"}) {
    if (j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= c.vocab_size) {
      fail(source, std::string("field '") + key + "' is outside the vocabulary");
    }
  }
  if (j.contains("decoder_vocab_size") && j["decoder_vocab_size"].is_number_integer() &&
      j["decoder_vocab_size"].get<int64_t>() != c.vocab_size) {
    fail(source, "unsupported field 'decoder_vocab_size': separate target vocabularies are not supported");
  }
  if (j.contains("normalize_before") && j["normalize_before"].is_boolean() &&
      j["normalize_before"].get<bool>()) {
    fail(source, "unsupported field 'normalize_before' = true (Marian models are post-norm)");
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
