#include "model/config/model_config.h"

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

// One line naming every refused field: "unsupported field 'x' = v (why)".
void refuse_all(const std::vector<std::string>& refused, const std::string& source) {
  if (refused.empty()) return;
  std::string msg = refused.size() == 1 ? "unsupported field " : "unsupported fields ";
  for (size_t i = 0; i < refused.size(); ++i) msg += (i ? ", " : "") + refused[i];
  fail(source, msg);
}

// A boolean field that must keep the value the family's architecture has (absent or null
// fields are the family's own).
struct Fixed {
  const char* key;
  bool value;
  const char* why;
};
void check_fixed(const json& j, std::initializer_list<Fixed> fields, std::vector<std::string>* refused) {
  for (const Fixed& f : fields) {
    if (j.contains(f.key) && !j[f.key].is_null() && j[f.key] != f.value) {
      refused->push_back(std::string("'") + f.key + "' = " + j[f.key].dump() + " (" + f.why + ")");
    }
  }
}

void check_architectures(const json& j, std::initializer_list<const char*> allowed, const std::string& source) {
  if (!j.contains("architectures") || !j["architectures"].is_array()) return;
  for (const auto& a : j["architectures"]) {
    bool ok = false;
    for (const char* name : allowed) ok = ok || a == name;
    if (!ok) {
      fail(source, "unsupported field 'architectures' = " + j["architectures"].dump() + " (only " +
                       *allowed.begin() + " is supported)");
    }
  }
}

void parse_activation_field(const json& j, const char* fallback, kernels::Activation* out,
                            const std::string& source) {
  const std::string act = j.contains("activation_function") ? j.value("activation_function", "") : fallback;
  if (!kernels::parse_activation(act, out)) {
    fail(source, "unsupported field 'activation_function' = '" + act + "' (supported: relu, gelu, swish, silu)");
  }
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// The generation settings transformers' generate() applies by default to the M2M-100 and
// mBART families: from generation_config.json when the model has one (generate() then reads
// nothing of them from config.json), else from config.json.
void parse_generation(const json& g, const std::string& source, ModelConfig* c) {
  // The EOS generate() stops at is the one the engines and the tokenizer know.
  if (present(g, "eos_token_id") && g["eos_token_id"] != c->eos_id) {
    fail(source, "unsupported field 'eos_token_id' = " + g["eos_token_id"].dump() + " (config.json's is " +
                     std::to_string(c->eos_id) + "; one EOS id is supported)");
  }
  if (present(g, "decoder_start_token_id")) {
    c->decoder_start_id = int_field(g, "decoder_start_token_id", source, 0);
  }
  c->forced_bos_id = optional_int(g, "forced_bos_token_id", c->forced_bos_id, source);
  if (present(g, "forced_eos_token_id")) {
    if (!g["forced_eos_token_id"].is_number_integer() || g["forced_eos_token_id"].get<int64_t>() != c->eos_id) {
      fail(source, "unsupported field 'forced_eos_token_id' = " + g["forced_eos_token_id"].dump() +
                       " (only eos_token_id, " + std::to_string(c->eos_id) + ", is supported)");
    }
    c->forced_eos = true;
  } else if (g.contains("forced_eos_token_id")) {
    c->forced_eos = false;  // null: generate() forces nothing at the maximum length
  }
  // generate() bans <pad> only where bad_words_ids says so; the engines ban nothing else.
  if (present(g, "bad_words_ids")) {
    if (g["bad_words_ids"] != json::array({json::array({c->pad_id})})) {
      fail(source, "unsupported field 'bad_words_ids' = " + g["bad_words_ids"].dump() + " (only [[" +
                       std::to_string(c->pad_id) + "]], the pad token, is supported)");
    }
    c->mask_pad = true;
  }
  // Logits processors that generate() would add and no engine applies.
  std::vector<std::string> refused;
  auto nonzero = [&](const char* key, double neutral) {
    if (present(g, key) && (!g[key].is_number() || g[key].get<double>() != neutral)) {
      refused.push_back(std::string("'") + key + "' = " + g[key].dump());
    }
  };
  nonzero("no_repeat_ngram_size", 0);
  nonzero("encoder_no_repeat_ngram_size", 0);
  nonzero("repetition_penalty", 1);
  nonzero("encoder_repetition_penalty", 1);
  for (const char* key : {"suppress_tokens", "begin_suppress_tokens", "forced_decoder_ids", "sequence_bias"}) {
    if (present(g, key) && !(g[key].is_array() && g[key].empty())) {
      refused.push_back(std::string("'") + key + "' = " + g[key].dump());
    }
  }
  if (!refused.empty()) refused.back() += " (not applied by the engines)";
  refuse_all(refused, source);
}

// M2M-100 / NLLB-200 and mBART-50: pre-norm, final norms, shared embeddings; the family's
// defaults where config.json leaves a field out (M2M100Config's, MBartConfig's).
void parse_fairseq_family(const json& j, const std::string& source, const json& gen, const std::string& gen_source,
                          ModelConfig* c) {
  const bool m2m = c->arch.family == Family::kM2M100;
  const char* model = m2m ? "M2M-100" : "mBART";
  c->share_embeddings = true;  // the model's one `shared` table feeds encoder, decoder (and lm_head)
  c->target_vocab_size = c->vocab_size;
  c->tie_output = optional_bool(j, "tie_word_embeddings", true, source);
  c->pad_id = optional_int(j, "pad_token_id", 1, source);
  c->eos_id = optional_int(j, "eos_token_id", 2, source);
  const int bos = optional_int(j, "bos_token_id", 0, source);
  c->scale_embedding = optional_bool(j, "scale_embedding", m2m, source);
  parse_activation_field(j, m2m ? "relu" : "gelu", &c->activation, source);
  // generate() starts the decoder from decoder_start_token_id, else bos_token_id.
  c->decoder_start_id = optional_int(j, "decoder_start_token_id", m2m ? 2 : bos, source);
  // Without generation_config.json generate() takes these from config.json, where
  // MBartConfig's forced_eos_token_id defaults to 2 (= eos) and M2M100Config has none.
  c->forced_eos = !m2m;
  c->mask_pad = false;
  if (gen.is_object()) {
    if (!present(gen, "decoder_start_token_id") && present(gen, "bos_token_id")) {
      c->decoder_start_id = int_field(gen, "bos_token_id", gen_source, 0);
    }
    // transformers' GenerationConfig defaults: no forced EOS unless the file names one.
    c->forced_eos = false;
    parse_generation(gen, gen_source, c);
  } else {
    parse_generation(j, source, c);
  }
  if (c->arch.positions == PositionKind::kFairseqSinusoidal && c->d_model < 4) {
    fail(source, "field 'd_model' must be at least 4 (fairseq's sinusoidal positions)");
  }
  std::vector<std::string> refused;
  const std::string pre = std::string(model) + " layers are pre-norm";
  check_fixed(j,
              {Fixed{"normalize_before", true, pre.c_str()},
               Fixed{"add_final_layer_norm", true, "the family has final layer norms"},
               Fixed{"normalize_embedding", !m2m, m2m ? "M2M-100 has no embedding layer norm" : "mBART has layernorm_embedding"},
               Fixed{"layernorm_embedding", !m2m, m2m ? "M2M-100 has no embedding layer norm" : "mBART has layernorm_embedding"},
               Fixed{"static_position_embeddings", m2m, m2m ? "M2M-100 positions are sinusoidal" : "mBART positions are learned"},
               Fixed{"add_bias_logits", false, "only final_logits_bias is added"},
               Fixed{"share_encoder_decoder_embeddings", true, "the family shares one embedding table"},
               Fixed{"tie_encoder_decoder", false, "encoder and decoder weights are not tied"},
               Fixed{"is_decoder", false, "a decoder-only model"},
               Fixed{"is_encoder_decoder", true, "the family is an encoder-decoder"}},
              &refused);
  refuse_all(refused, source);
  if (m2m) {
    check_architectures(j, {"M2M100ForConditionalGeneration", "M2M100Model"}, source);
  } else {
    check_architectures(j, {"MBartForConditionalGeneration", "MBartModel"}, source);
  }
}

// Marian: every field the engines need is required, as transformers' MarianConfig has no
// usable defaults for them.
void parse_marian(const json& j, const std::string& source, ModelConfig* c) {
  c->share_embeddings = optional_bool(j, "share_encoder_decoder_embeddings", true, source);
  c->tie_output = optional_bool(j, "tie_word_embeddings", true, source);
  // transformers' MarianMTModel sizes the decoder side by decoder_vocab_size only when the
  // embeddings are not shared (it defaults to vocab_size).
  c->target_vocab_size = c->share_embeddings ? c->vocab_size : optional_int(j, "decoder_vocab_size", c->vocab_size, source);
  if (c->target_vocab_size < 2) fail(source, "field 'decoder_vocab_size' has unsupported value " + std::to_string(c->target_vocab_size));
  c->pad_id = int_field(j, "pad_token_id", source, 0);
  c->eos_id = int_field(j, "eos_token_id", source, 0);
  c->decoder_start_id = optional_int(j, "decoder_start_token_id", c->pad_id, source);
  c->scale_embedding = optional_bool(j, "scale_embedding", false, source);
  parse_activation_field(j, "", &c->activation, source);
  // EOS is forced at the length limit with eos_token_id (MarianConfig's default for
  // forced_eos_token_id is 0, the usual EOS id).
  if (j.contains("forced_eos_token_id") && !j["forced_eos_token_id"].is_null() &&
      (!j["forced_eos_token_id"].is_number_integer() || j["forced_eos_token_id"].get<int64_t>() != c->eos_id)) {
    fail(source, "unsupported field 'forced_eos_token_id': only eos_token_id (" + std::to_string(c->eos_id) +
                     ") is supported");
  }
  // Fields of the Bart-era MarianConfig (still in many OPUS-MT config.json files) and of its
  // siblings that describe another architecture than the post-norm, sinusoidal, plain-logits
  // Marian the engines compute. transformers' Marian ignores them; a model trained that way
  // would translate wrongly, so it is refused, every such field named in the one line. Their
  // Marian values are accepted.
  std::vector<std::string> refused;
  check_fixed(j,
              {Fixed{"normalize_before", false, "Marian models are post-norm"},
               Fixed{"add_final_layer_norm", false, "Marian has no final layer norm"},
               Fixed{"normalize_embedding", false, "Marian has no embedding layer norm"},
               Fixed{"layernorm_embedding", false, "Marian has no embedding layer norm"},
               Fixed{"static_position_embeddings", true, "Marian positions are sinusoidal"},
               Fixed{"add_bias_logits", false, "Marian adds only final_logits_bias"},
               Fixed{"is_decoder", false, "a decoder-only model"},
               Fixed{"is_encoder_decoder", true, "Marian is an encoder-decoder"}},
              &refused);
  refuse_all(refused, source);
  check_architectures(j, {"MarianMTModel", "MarianModel"}, source);
}

}  // namespace

ModelConfig ModelConfig::parse(const std::string& text, const std::string& source, const std::string& generation_text,
                               const std::string& generation_source) {
  auto parse_json = [](const std::string& t, const std::string& where) {
    json out;
    try {
      out = json::parse(t);
    } catch (const json::exception& e) {  // syntax errors and out-of-range numbers alike
      fail(where, std::string("not valid JSON (") + e.what() + ")");
    }
    if (!out.is_object()) fail(where, "expected a JSON object");
    return out;
  };
  const json j = parse_json(text, source);
  const json gen = generation_text.empty() ? json() : parse_json(generation_text, generation_source);
  try {
    return parse_object(j, source, gen, generation_source);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    fail(source, std::string("invalid field value (") + e.what() + ")");
  }
}

ModelConfig ModelConfig::parse_object(const nlohmann::json& j, const std::string& source, const nlohmann::json& gen,
                                      const std::string& generation_source) {
  const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  ModelConfig c;
  if (type == "marian") {
    c.arch = Architecture::of(Family::kMarian);
  } else if (type == "m2m_100") {
    c.arch = Architecture::of(Family::kM2M100);
  } else if (type == "mbart") {
    c.arch = Architecture::of(Family::kMBart);
  } else {
    fail(source, "unsupported field 'model_type' = '" + type + "' (supported: 'marian', 'm2m_100', 'mbart')");
  }
  c.d_model = int_field(j, "d_model", source, 1);
  c.encoder_layers = int_field(j, "encoder_layers", source, 1);
  c.decoder_layers = int_field(j, "decoder_layers", source, 1);
  c.encoder_heads = int_field(j, "encoder_attention_heads", source, 1);
  c.decoder_heads = int_field(j, "decoder_attention_heads", source, 1);
  c.encoder_ffn_dim = int_field(j, "encoder_ffn_dim", source, 1);
  c.decoder_ffn_dim = int_field(j, "decoder_ffn_dim", source, 1);
  c.vocab_size = int_field(j, "vocab_size", source, 2);
  c.max_positions = int_field(j, "max_position_embeddings", source, 1);
  if (c.arch.family == Family::kMarian) {
    parse_marian(j, source, &c);
  } else {
    parse_fairseq_family(j, source, gen, generation_source, &c);
  }
  if (c.d_model % c.encoder_heads != 0) {
    fail(source, "field 'encoder_attention_heads' must divide 'd_model'");
  }
  if (c.d_model % c.decoder_heads != 0) {
    fail(source, "field 'decoder_attention_heads' must divide 'd_model'");
  }
  if (c.d_model % 2 != 0) fail(source, "field 'd_model' must be even (sinusoidal positions)");
  // The decoder's special ids index the target vocabulary.
  for (auto [key, id] : {std::pair<const char*, int>{"pad_token_id", c.pad_id}, {"eos_token_id", c.eos_id},
                         {"decoder_start_token_id", c.decoder_start_id}, {"forced_bos_token_id", c.forced_bos_id}}) {
    if (id >= c.target_vocab_size) fail(source, std::string("field '") + key + "' is outside the vocabulary");
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot open model config (missing file?)");
  std::stringstream ss;
  ss << in.rdbuf();
  // generate() reads its settings from generation_config.json where the model has one.
  const std::string gen_path = model_dir + "/generation_config.json";
  std::string gen_text;
  if (std::ifstream gen(gen_path); gen) {
    std::stringstream gs;
    gs << gen.rdbuf();
    gen_text = gs.str();
    if (gen_text.empty()) fail(gen_path, "empty file");
  }
  return parse(ss.str(), path, gen_text, gen_path);
}

}  // namespace nmt
