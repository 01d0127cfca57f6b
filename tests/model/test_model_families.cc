// The M2M-100 / NLLB-200 and mBART-50 families beside Marian (issue 51), without the
// conformance data: config.json / generation_config.json parsing and refusals, the weights
// each family needs, the position tables, and the CPU engine's pre-norm forward pass against a
// plain re-computation of transformers' modeling_m2m_100.py / modeling_mbart.py on a tiny
// random model written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <nlohmann/json.hpp>

#include "model/architecture.h"
#include "model/beam_search.h"
#include "model/cpu/candidates.h"
#include "model/cpu_engine.h"
#include "model/error.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tests/support/conformance.h"

namespace fs = std::filesystem;
using namespace nmt;
using nlohmann::json;

namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

// A config.json as transformers 5.17 writes it for a tiny M2M-100 / NLLB or mBART model.
json family_config(const std::string& model_type) {
  const bool m2m = model_type == "m2m_100";
  return json{{"model_type", model_type},
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

std::string parse_error(const json& config, const json& gen = json()) {
  try {
    ModelConfig::parse(config.dump(), "dir/config.json", gen.is_null() ? "" : gen.dump(),
                       "dir/generation_config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Architecture, FamiliesAsTransformersBuildsThem) {
  const Architecture marian = Architecture::of(Family::kMarian);
  EXPECT_EQ(marian.norm_order, NormOrder::kPost);
  EXPECT_FALSE(marian.embedding_norm || marian.final_encoder_norm || marian.final_decoder_norm ||
               marian.pad_position_zero);
  EXPECT_EQ(marian.position_offset, 0);
  const Architecture m2m = Architecture::of(Family::kM2M100);
  EXPECT_EQ(m2m.norm_order, NormOrder::kPre);
  EXPECT_TRUE(m2m.final_encoder_norm && m2m.final_decoder_norm && m2m.pad_position_zero);
  EXPECT_FALSE(m2m.embedding_norm);
  EXPECT_EQ(m2m.positions, PositionKind::kFairseqSinusoidal);
  EXPECT_EQ(m2m.position_offset, 2);
  const Architecture mbart = Architecture::of(Family::kMBart);
  EXPECT_EQ(mbart.norm_order, NormOrder::kPre);
  EXPECT_TRUE(mbart.embedding_norm && mbart.final_encoder_norm && mbart.final_decoder_norm);
  EXPECT_FALSE(mbart.pad_position_zero);
  EXPECT_EQ(mbart.positions, PositionKind::kLearned);
  EXPECT_EQ(mbart.position_offset, 2);
  EXPECT_STREQ(family_name(Family::kMarian), "marian");
  EXPECT_STREQ(family_name(Family::kM2M100), "m2m_100");
  EXPECT_STREQ(family_name(Family::kMBart), "mbart");
}

TEST(FamilyConfig, M2M100ParsesWithItsDefaults) {
  json j = family_config("m2m_100");
  for (const char* key : {"activation_function", "scale_embedding", "pad_token_id", "eos_token_id",
                          "decoder_start_token_id", "tie_word_embeddings"}) {
    j.erase(key);  // M2M100Config's defaults: relu, scaled, pad 1, </s> 2 starts, tied
  }
  const ModelConfig c = ModelConfig::parse(j.dump(), "config.json");
  EXPECT_EQ(c.arch.family, Family::kM2M100);
  EXPECT_EQ(c.activation, kernels::Activation::kRelu);
  EXPECT_TRUE(c.scale_embedding);
  EXPECT_EQ(c.pad_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_EQ(c.decoder_start_id, 2);
  EXPECT_TRUE(c.tie_output && c.share_embeddings);
  EXPECT_EQ(c.target_vocab_size, c.vocab_size);
  EXPECT_EQ(c.forced_bos_id, -1);
  EXPECT_FALSE(c.forced_eos) << "M2M100Config has no forced_eos_token_id";
  EXPECT_FALSE(c.mask_pad) << "generate() bans no token for M2M-100 without bad_words_ids";
}

TEST(FamilyConfig, MBartParsesWithItsDefaults) {
  json j = family_config("mbart");
  for (const char* key : {"activation_function", "scale_embedding", "decoder_start_token_id"}) j.erase(key);
  const ModelConfig c = ModelConfig::parse(j.dump(), "config.json");
  EXPECT_EQ(c.arch.family, Family::kMBart);
  EXPECT_EQ(c.activation, kernels::Activation::kGelu);
  EXPECT_FALSE(c.scale_embedding) << "MBartConfig's scale_embedding defaults to false";
  EXPECT_EQ(c.decoder_start_id, 0) << "no decoder_start_token_id: generate() starts from bos_token_id";
  EXPECT_TRUE(c.forced_eos) << "MBartConfig's forced_eos_token_id defaults to 2";
}

// generate() reads generation_config.json where the model has one, and config.json's
// generation fields only where it has none.
TEST(FamilyConfig, GenerationSettingsComeFromGenerationConfig) {
  json j = family_config("m2m_100");
  j["forced_bos_token_id"] = 7;
  ModelConfig c = ModelConfig::parse(j.dump(), "config.json");
  EXPECT_EQ(c.forced_bos_id, 7);

  const json gen = {{"decoder_start_token_id", 2}, {"eos_token_id", 2}, {"forced_bos_token_id", 9},
                    {"bad_words_ids", {{1}}}, {"forced_eos_token_id", 2}};
  c = ModelConfig::parse(j.dump(), "config.json", gen.dump(), "generation_config.json");
  EXPECT_EQ(c.forced_bos_id, 9);
  EXPECT_TRUE(c.mask_pad);
  EXPECT_TRUE(c.forced_eos);

  // A generation_config.json without the fields: nothing forced, nothing banned (config.json's
  // forced_bos_token_id is not read then, as generate() does not).
  json mbart = family_config("mbart");
  mbart["forced_bos_token_id"] = 7;
  c = ModelConfig::parse(mbart.dump(), "config.json", json{{"decoder_start_token_id", 3}}.dump(), "g.json");
  EXPECT_EQ(c.forced_bos_id, -1);
  EXPECT_FALSE(c.forced_eos);
  EXPECT_FALSE(c.mask_pad);
  EXPECT_EQ(c.decoder_start_id, 3);

  // Marian keeps its rules: pad banned, EOS forced, no forced first token.
  const json marian = {{"model_type", "marian"}, {"d_model", 8}, {"encoder_layers", 1}, {"decoder_layers", 1},
                       {"encoder_attention_heads", 2}, {"decoder_attention_heads", 2}, {"encoder_ffn_dim", 4},
                       {"decoder_ffn_dim", 4}, {"vocab_size", 10}, {"pad_token_id", 9}, {"eos_token_id", 0},
                       {"max_position_embeddings", 16}, {"activation_function", "relu"}};
  c = ModelConfig::parse(marian.dump(), "config.json", json{{"bad_words_ids", {{9}}}}.dump(), "g.json");
  EXPECT_EQ(c.arch.family, Family::kMarian);
  EXPECT_TRUE(c.mask_pad && c.forced_eos);
  EXPECT_EQ(c.forced_bos_id, -1);
}

// Values the engines do not compute as transformers would are refused, one line naming the
// file and the field.
TEST(FamilyConfig, RefusedFieldsAreNamed) {
  const std::vector<std::tuple<std::string, std::string, json>> config_refusals = {
      {"m2m_100", "normalize_before", false},
      {"m2m_100", "add_final_layer_norm", false},
      {"m2m_100", "normalize_embedding", true},
      {"m2m_100", "static_position_embeddings", false},
      {"m2m_100", "add_bias_logits", true},
      {"m2m_100", "share_encoder_decoder_embeddings", false},
      {"m2m_100", "tie_encoder_decoder", true},
      {"m2m_100", "is_encoder_decoder", false},
      {"m2m_100", "activation_function", "gelu_new"},
      {"m2m_100", "architectures", {"M2M100ForCausalLM"}},
      {"m2m_100", "forced_eos_token_id", 5},
      {"m2m_100", "tie_word_embeddings", "yes"},
      {"m2m_100", "scale_embedding", 1.5},
      {"m2m_100", "bad_words_ids", {{4}}},
      {"m2m_100", "no_repeat_ngram_size", 3},
      {"m2m_100", "forced_bos_token_id", 20},
      {"mbart", "normalize_embedding", false},
      {"mbart", "layernorm_embedding", false},
      {"mbart", "static_position_embeddings", true},
      {"mbart", "normalize_before", false},
      {"mbart", "activation_function", "tanh"},
      {"mbart", "architectures", {"MBartForSequenceClassification"}},
  };
  for (const auto& [type, field, value] : config_refusals) {
    json j = family_config(type);
    j[field] = value;
    const std::string msg = parse_error(j);
    EXPECT_HAS(msg, "dir/config.json: ");
    EXPECT_HAS(msg, "'" + field + "'");
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // The logits processors generate() would add from generation_config.json and no engine
  // applies.
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"bad_words_ids", {{1}, {5}}},
           {"no_repeat_ngram_size", 2},
           {"repetition_penalty", 1.2},
           {"suppress_tokens", {3}},
           {"begin_suppress_tokens", {3}},
           {"forced_decoder_ids", {{1, 4}}},
           {"forced_eos_token_id", 3},
           {"eos_token_id", {2, 5}}}) {
    const std::string msg = parse_error(family_config("m2m_100"), json{{field, value}});
    EXPECT_HAS(msg, "dir/generation_config.json: ");
    EXPECT_HAS(msg, "'" + field + "'");
  }
  // Their neutral values load.
  EXPECT_EQ(parse_error(family_config("m2m_100"), json{{"no_repeat_ngram_size", 0}, {"repetition_penalty", 1.0},
                                                       {"suppress_tokens", json::array()}, {"bad_words_ids", nullptr}}),
            "no error");
  // Several at once: all in the one line.
  json j = family_config("mbart");
  j["normalize_before"] = false;
  j["add_bias_logits"] = true;
  EXPECT_HAS(parse_error(j), "unsupported fields 'normalize_before' = false (mBART layers are pre-norm), "
                             "'add_bias_logits' = true");
  j = family_config("bart");
  EXPECT_HAS(parse_error(j), "unsupported field 'model_type' = 'bart' (supported: 'marian', 'm2m_100', 'mbart')");
  // Marian still refuses the Bart-era fields the other families have.
  j = family_config("m2m_100");
  j["model_type"] = "marian";
  j["architectures"] = {"MarianMTModel"};
  j["normalize_before"] = true;
  EXPECT_HAS(parse_error(j), "'normalize_before' = true (Marian models are post-norm)");
}

// fairseq's table as transformers' M2M100SinusoidalPositionalEmbedding.get_embedding makes
// it: row p + 2 for the engine's position p, sin | cos, frequency 10000^(-j / (half - 1)).
TEST(FamilyPositions, FairseqSinusoidsFromTheOffset) {
  const int d = 8, half = 4;
  const HostTensor t = Weights::fairseq_sinusoidal_positions(5, d, 2);
  ASSERT_EQ(t.shape, (std::vector<int64_t>{5, d}));
  for (int p = 0; p < 5; ++p) {
    for (int j = 0; j < half; ++j) {
      const double angle = (p + 2) * std::pow(10000.0, -double(j) / (half - 1));
      EXPECT_NEAR(t.data[size_t(p * d + j)], std::sin(angle), 2e-6) << p << " " << j;
      EXPECT_NEAR(t.data[size_t(p * d + half + j)], std::cos(angle), 2e-6) << p << " " << j;
    }
  }
  // Marian's differs (exponent 2j / d, from position 0): the families do not share a table.
  const HostTensor marian = Weights::sinusoidal_positions(5, d);
  EXPECT_NE(marian.data, t.data);
}

// Forced first token and forced EOS in the CPU engine's candidates: the forced token's
// log-prob is 0, every other token's -inf; EOS wins where both apply (ForcedEOS runs last).
TEST(FamilyCandidates, ForcedTokenIsTheOnlyCandidate) {
  const std::vector<float> logits = {0.5f, 3.f, 1.f, -2.f, 0.25f, 2.f};
  cpu::RowMasks masks;
  masks.pad_id = 1;
  masks.eos_id = 2;
  masks.forced_token = 4;
  std::vector<float> scores(3);
  std::vector<int> tokens(3);
  cpu::row_topk(logits.data(), 6, -1.5f, masks, 3, scores.data(), tokens.data());
  EXPECT_EQ(tokens[0], 4);
  EXPECT_EQ(scores[0], -1.5f);
  EXPECT_TRUE(std::isinf(scores[1]) && scores[1] < 0 && std::isinf(scores[2]));
  masks.force_eos = true;
  cpu::row_topk(logits.data(), 6, -1.5f, masks, 3, scores.data(), tokens.data());
  EXPECT_EQ(tokens[0], 2);
  EXPECT_EQ(scores[0], -1.5f);
  // Not forced: pad is masked only where pad_id is set (ModelConfig::mask_pad).
  masks = cpu::RowMasks{};
  masks.eos_id = 2;
  cpu::row_topk(logits.data(), 6, 0.f, masks, 1, scores.data(), tokens.data());
  EXPECT_EQ(tokens[0], 1);
  masks.pad_id = 1;
  cpu::row_topk(logits.data(), 6, 0.f, masks, 1, scores.data(), tokens.data());
  EXPECT_EQ(tokens[0], 5);
}

// The search asks for the forced token at the first step only (transformers' cur_len == 1),
// the request's id over the model's default; EOS is forced at the limit only where the model
// forces it, while every hypothesis still ends there.
TEST(FamilySearch, ForcedTokenAtTheFirstStepOnly) {
  ModelConfig c;
  c.eos_id = 2;
  c.forced_bos_id = 7;
  c.forced_eos = false;
  DecodeOptions o;
  o.beam_size = 2;
  o.max_decoding_length = 3;
  SentenceSearch model_default(o, c);
  EXPECT_EQ(model_default.forced_token(), 7);
  EXPECT_EQ(model_default.forced_token(1), -1);
  o.forced_bos_id = 5;
  SentenceSearch s(o, c);
  EXPECT_EQ(s.forced_token(), 5);
  const int vocab = 10;
  // Step 0: the engine's forced candidates (beam 0's at 0, beam 1's at -1e9, the rest -inf).
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> scores = {0.f, -1e9f, -inf, -inf};
  std::vector<int> cands = {5, vocab + 5, 0, 1};
  ASSERT_FALSE(s.advance(scores.data(), cands.data(), vocab));
  EXPECT_EQ(s.forced_token(), -1);
  EXPECT_EQ(s.tokens()[0], 5);
  EXPECT_FALSE(s.last_step());
  scores = {-0.5f, -0.7f, -1.f, -2.f};
  cands = {3, 4, 6, 8};
  ASSERT_FALSE(s.advance(scores.data(), cands.data(), vocab));
  EXPECT_TRUE(s.last_step());
  EXPECT_FALSE(s.force_eos()) << "the model has no forced_eos_token_id";
  // The last step: the hypotheses end with the tokens they chose (no EOS), 3 tokens long.
  scores = {-0.9f, -1.1f, -1.3f, -1.4f};
  cands = {9, 8, vocab + 9, 6};
  ASSERT_TRUE(s.advance(scores.data(), cands.data(), vocab));
  const DecodeResult r = s.result();
  EXPECT_EQ(r.ids[0], (std::vector<int>{5, 3, 9}));
  EXPECT_FLOAT_EQ(r.scores[0], -0.9f / 3);
}

namespace {

// A tiny random model of a family written as transformers' save_pretrained writes it (one
// shared table; mBART with its learned positions, layernorm_embedding and final_logits_bias).
class TinyFamilyModel {
 public:
  TinyFamilyModel(const std::string& model_type, unsigned seed) : config_json_(family_config(model_type)) {
    dir_ = fs::temp_directory_path() /
           ("nmt-family-" + std::to_string(::getpid()) + "-" + model_type + "-" + std::to_string(seed));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(seed);
    const ModelConfig c = ModelConfig::parse(config_json_.dump(), "config.json");
    const int64_t d = c.d_model, v = c.vocab_size;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean = 0.f) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      std::normal_distribution<float> dist(mean, scale);
      HostTensor t;
      t.shape = std::move(shape);
      t.data.resize(size_t(n));
      for (float& x : t.data) x = dist(rng);
      tensors_[name] = std::move(t);
    };
    add("model.shared.weight", {v, d}, 0.5f);
    auto attention = [&](const std::string& p) {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        add(p + proj + ".weight", {d, d}, 0.4f);
        add(p + proj + ".bias", {d}, 0.1f);
      }
    };
    auto norm = [&](const std::string& p) {
      add(p + ".weight", {d}, 0.2f, 1.f);
      add(p + ".bias", {d}, 0.1f);
    };
    auto ffn = [&](const std::string& p, int64_t f) {
      add(p + "fc1.weight", {f, d}, 0.4f);
      add(p + "fc1.bias", {f}, 0.1f);
      add(p + "fc2.weight", {d, f}, 0.4f);
      add(p + "fc2.bias", {d}, 0.1f);
      norm(p + "final_layer_norm");
    };
    attention("model.encoder.layers.0.self_attn.");
    norm("model.encoder.layers.0.self_attn_layer_norm");
    ffn("model.encoder.layers.0.", c.encoder_ffn_dim);
    attention("model.decoder.layers.0.self_attn.");
    norm("model.decoder.layers.0.self_attn_layer_norm");
    attention("model.decoder.layers.0.encoder_attn.");
    norm("model.decoder.layers.0.encoder_attn_layer_norm");
    ffn("model.decoder.layers.0.", c.decoder_ffn_dim);
    norm("model.encoder.layer_norm");
    norm("model.decoder.layer_norm");
    if (c.arch.family == Family::kMBart) {
      norm("model.encoder.layernorm_embedding");
      norm("model.decoder.layernorm_embedding");
      add("model.encoder.embed_positions.weight", {c.max_positions + 2, d}, 0.5f);
      add("model.decoder.embed_positions.weight", {c.max_positions + 2, d}, 0.5f);
      add("final_logits_bias", {1, v}, 0.3f);
    }
    save();
  }
  ~TinyFamilyModel() { fs::remove_all(dir_); }

  // float16: the tensors are rounded to it first (the plain forward pass then reads what the
  // file holds).
  void save(bool float16 = false) {
    std::ofstream(dir_ / "config.json") << config_json_.dump();
    json header = json::object();
    std::string data;
    for (auto& [name, t] : tensors_) {
      const size_t begin = data.size();
      if (float16) {
        for (float& x : t.data) {
          const _Float16 h = static_cast<_Float16>(x);
          x = static_cast<float>(h);
          data.append(reinterpret_cast<const char*>(&h), sizeof(h));
        }
      } else {
        data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
      }
      header[name] = {{"dtype", float16 ? "F16" : "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
    std::ofstream(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc) << len << h << data;
  }
  void write_generation_config(const json& gen) const { std::ofstream(dir_ / "generation_config.json") << gen.dump(); }
  std::string dir() const { return dir_.string(); }
  ModelConfig config() const { return ModelConfig::load(dir()); }
  const HostTensor& tensor(const std::string& name) const { return tensors_.at(name); }
  std::map<std::string, HostTensor>& tensors() { return tensors_; }

 private:
  json config_json_;
  fs::path dir_;
  std::map<std::string, HostTensor> tensors_;
};

std::string weights_error(const TinyFamilyModel& m) {
  try {
    Weights::load(m.dir(), m.config());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// transformers' forward pass of the family, written out plainly in double: the reference the
// engine's encoder output and first-step log-probs are held to.
class PlainForward {
 public:
  PlainForward(const TinyFamilyModel& m, const ModelConfig& c) : m_(m), c_(c), d_(c.d_model) {}

  using Rows = std::vector<std::vector<double>>;

  Rows encode(const std::vector<int>& ids) const {
    Rows x = embed("model.encoder", ids, 0);
    const std::string p = "model.encoder.layers.0.";
    x = add(x, self_attention(norm(x, p + "self_attn_layer_norm"), p + "self_attn.", false));
    x = add(x, ffn(norm(x, p + "final_layer_norm"), p));
    return norm(x, "model.encoder.layer_norm");
  }

  // Log-probs of the first target token after decoder_start_id, given the encoder output.
  std::vector<double> first_step(const Rows& enc) const {
    Rows y = embed("model.decoder", {c_.decoder_start_id}, 0);
    const std::string p = "model.decoder.layers.0.";
    y = add(y, self_attention(norm(y, p + "self_attn_layer_norm"), p + "self_attn.", true));
    y = add(y, cross_attention(norm(y, p + "encoder_attn_layer_norm"), enc, p + "encoder_attn."));
    y = add(y, ffn(norm(y, p + "final_layer_norm"), p));
    y = norm(y, "model.decoder.layer_norm");
    const HostTensor& e = m_.tensor("model.shared.weight");
    std::vector<double> logits(size_t(c_.vocab_size));
    for (int t = 0; t < c_.vocab_size; ++t) {
      double s = c_.arch.family == Family::kMBart ? m_.tensor("final_logits_bias").data[size_t(t)] : 0.0;
      for (int j = 0; j < d_; ++j) s += y[0][size_t(j)] * e.data[size_t(t * d_ + j)];
      logits[size_t(t)] = s;
    }
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double l : logits) sum += std::exp(l - mx);
    for (double& l : logits) l = l - mx - std::log(sum);
    return logits;
  }

 private:
  Rows embed(const std::string& stack, const std::vector<int>& ids, int past) const {
    const HostTensor& e = m_.tensor("model.shared.weight");
    const double scale = c_.scale_embedding ? std::sqrt(double(d_)) : 1.0;
    Rows x(ids.size(), std::vector<double>(size_t(d_)));
    int counted = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      std::vector<double> pos(size_t(d_), 0.0);
      if (c_.arch.family == Family::kM2M100) {
        // create_position_ids_from_input_ids: non-pad tokens count from padding_idx + 1.
        if (ids[t] != c_.pad_id) {
          const int row = ++counted + past + c_.pad_id;
          for (int j = 0; j < d_ / 2; ++j) {
            const double angle = row * std::exp(-j * std::log(10000.0) / (d_ / 2 - 1));
            pos[size_t(j)] = std::sin(angle);
            pos[size_t(d_ / 2 + j)] = std::cos(angle);
          }
        }
      } else {  // MBartLearnedPositionalEmbedding: row position + 2
        const HostTensor& table = m_.tensor(stack + ".embed_positions.weight");
        for (int j = 0; j < d_; ++j) pos[size_t(j)] = table.data[(t + past + 2) * size_t(d_) + size_t(j)];
      }
      for (int j = 0; j < d_; ++j) x[t][size_t(j)] = e.data[size_t(ids[t] * d_ + j)] * scale + pos[size_t(j)];
    }
    return c_.arch.family == Family::kMBart ? norm(x, stack + ".layernorm_embedding") : x;
  }
  Rows norm(const Rows& x, const std::string& name) const {
    const HostTensor& g = m_.tensor(name + ".weight");
    const HostTensor& b = m_.tensor(name + ".bias");
    Rows y = x;
    for (auto& row : y) {
      double mean = 0, var = 0;
      for (double v : row) mean += v / d_;
      for (double v : row) var += (v - mean) * (v - mean) / d_;
      for (int j = 0; j < d_; ++j) row[size_t(j)] = (row[size_t(j)] - mean) / std::sqrt(var + 1e-5) * g.data[size_t(j)] + b.data[size_t(j)];
    }
    return y;
  }
  Rows linear(const Rows& x, const std::string& name) const {
    const HostTensor& w = m_.tensor(name + ".weight");
    const HostTensor& b = m_.tensor(name + ".bias");
    const int64_t out = w.shape[0], in = w.shape[1];
    Rows y(x.size(), std::vector<double>(size_t(out)));
    for (size_t r = 0; r < x.size(); ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double s = b.data[size_t(o)];
        for (int64_t i = 0; i < in; ++i) s += x[r][size_t(i)] * w.data[size_t(o * in + i)];
        y[r][size_t(o)] = s;
      }
    }
    return y;
  }
  static Rows add(const Rows& a, const Rows& b) {
    Rows y = a;
    for (size_t r = 0; r < y.size(); ++r)
      for (size_t j = 0; j < y[r].size(); ++j) y[r][j] += b[r][j];
    return y;
  }
  Rows attend(const Rows& q, const Rows& k, const Rows& v, bool causal, int heads) const {
    const int hd = d_ / heads;
    Rows out(q.size(), std::vector<double>(size_t(d_), 0.0));
    for (size_t i = 0; i < q.size(); ++i) {
      for (int h = 0; h < heads; ++h) {
        const size_t keys = causal ? i + 1 : k.size();
        std::vector<double> s(keys);
        for (size_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int c = 0; c < hd; ++c) dot += q[i][size_t(h * hd + c)] * k[j][size_t(h * hd + c)];
          s[j] = dot / std::sqrt(double(hd));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (size_t j = 0; j < keys; ++j)
          for (int c = 0; c < hd; ++c) out[i][size_t(h * hd + c)] += s[j] / sum * v[j][size_t(h * hd + c)];
      }
    }
    return out;
  }
  Rows self_attention(const Rows& x, const std::string& p, bool causal) const {
    const int heads = causal ? c_.decoder_heads : c_.encoder_heads;
    return linear(attend(linear(x, p + "q_proj"), linear(x, p + "k_proj"), linear(x, p + "v_proj"), causal, heads),
                  p + "out_proj");
  }
  Rows cross_attention(const Rows& y, const Rows& enc, const std::string& p) const {
    return linear(attend(linear(y, p + "q_proj"), linear(enc, p + "k_proj"), linear(enc, p + "v_proj"), false,
                         c_.decoder_heads),
                  p + "out_proj");
  }
  Rows ffn(const Rows& x, const std::string& p) const {
    Rows h = linear(x, p + "fc1");
    for (auto& row : h) {
      for (double& v : row) {
        v = c_.activation == kernels::Activation::kRelu ? std::max(v, 0.0) : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      }
    }
    return linear(h, p + "fc2");
  }

  const TinyFamilyModel& m_;
  const ModelConfig c_;
  const int d_;
};

}  // namespace

TEST(FamilyWeights, EachFamilysTensorsAreChecked) {
  for (const std::string type : {"m2m_100", "mbart"}) {
    SCOPED_TRACE(type);
    TinyFamilyModel m(type, 1);
    EXPECT_EQ(weights_error(m), "no error");
    const HostTensor kept = m.tensor("model.decoder.layer_norm.bias");
    m.tensors().erase("model.decoder.layer_norm.bias");
    m.save();
    EXPECT_HAS(weights_error(m), "model.safetensors: missing tensor 'model.decoder.layer_norm.bias'");
    m.tensors()["model.decoder.layer_norm.bias"] = kept;
    if (type == "mbart") {
      m.tensors().erase("model.encoder.layernorm_embedding.weight");
      m.save();
      EXPECT_HAS(weights_error(m), "missing tensor 'model.encoder.layernorm_embedding.weight'");
      m.tensors()["model.encoder.layernorm_embedding.weight"] = m.tensor("model.encoder.layer_norm.weight");
      // the learned table holds max_position_embeddings + 2 rows
      HostTensor& pos = m.tensors()["model.decoder.embed_positions.weight"];
      pos.shape[0] -= 2;
      pos.data.resize(size_t(pos.shape[0] * pos.shape[1]));
      m.save();
      EXPECT_HAS(weights_error(m), "tensor 'model.decoder.embed_positions.weight' has shape [16, 8], expected [18, 8]");
    }
  }
  // The learned table is indexed by the engine's position: row p + 2 of the stored one.
  TinyFamilyModel m("mbart", 2);
  const Weights w = Weights::load(m.dir(), m.config());
  const HostTensor& stored = m.tensor("model.encoder.embed_positions.weight");
  ASSERT_EQ(w.encoder_positions().shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(w.encoder_positions().data[0], stored.data[2 * 8]);
  EXPECT_EQ(w.decoder_positions().data[15 * 8 + 7], m.tensor("model.decoder.embed_positions.weight").data[17 * 8 + 7]);
  EXPECT_FALSE(w.output_bias_is_zero());
  // Each module's stored copy of the shared table (and a tied lm_head's): held once.
  TinyFamilyModel copies("m2m_100", 4);
  for (const char* name : {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"}) {
    copies.tensors()[name] = copies.tensor("model.shared.weight");
  }
  copies.save();
  const Weights held = Weights::load(copies.dir(), copies.config());
  EXPECT_EQ(held.decoder_embeddings().data.data(), held.encoder_embeddings().data.data());
  EXPECT_EQ(held.output_projection().data.data(), held.encoder_embeddings().data.data());
  EXPECT_EQ(held.encoder_embeddings().data, copies.tensor("model.shared.weight").data);
  // M2M-100 adds no final_logits_bias (transformers drops a stored one).
  TinyFamilyModel m2m("m2m_100", 3);
  m2m.tensors()["final_logits_bias"] = m.tensor("final_logits_bias");
  m2m.save();
  EXPECT_TRUE(Weights::load(m2m.dir(), m2m.config()).output_bias_is_zero());
}

// The engine's pre-norm encoder and first decoder step against the plain forward pass, on a
// source holding a <pad> inside (M2M-100 numbers only the other tokens), float32 and int8,
// from float32 and float16 files.
TEST(FamilyEngine, PreNormForwardMatchesThePlainComputation) {
  for (const auto& [type, float16] : {std::pair<std::string, bool>{"m2m_100", false}, {"mbart", false},
                                      {"m2m_100", true}, {"mbart", true}}) {
    SCOPED_TRACE(type + (float16 ? " stored as float16" : ""));
    TinyFamilyModel m(type, 11);
    if (float16) m.save(true);  // read as float32, computed in float32
    const ModelConfig c = m.config();
    const Weights w = Weights::load(m.dir(), c);
    const PlainForward plain(m, c);
    const std::vector<int> source = {5, 9, 1, 13, 7, 2};
    const auto enc = plain.encode(source);
    const std::vector<double> logp = plain.first_step(enc);
    for (const bool int8 : {false, true}) {
      SCOPED_TRACE(int8 ? "int8" : "float32");
      auto engine = make_cpu_engine(c, w, 0, 1, int8);
      engine->reserve({1, 4, 8});
      engine->encode({EncodeItem{&source, 0}});
      const std::vector<float> out = engine->encoder_output(0);
      ASSERT_EQ(out.size(), source.size() * 8);
      const double tolerance = int8 ? 0.1 : 1e-4;
      for (size_t t = 0; t < source.size(); ++t)
        for (size_t j = 0; j < 8; ++j) EXPECT_NEAR(out[t * 8 + j], enc[t][j], tolerance) << t << " " << j;
      // First step: the k best of the whole vocabulary (<pad> included: not banned here).
      StepInput in;
      StepGroup g;
      g.k = 5;
      in.groups = {g};
      in.tokens = {c.decoder_start_id};
      in.cache_rows = {0};
      in.parent_rows = {0};
      in.running_scores = {0.f};
      StepOutput result;
      engine->step(in, &result);
      std::vector<int> order(logp.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logp[size_t(a)] > logp[size_t(b)]; });
      ASSERT_EQ(result.scores.size(), 5u);
      for (size_t i = 0; i < 5; ++i) {
        if (!int8) EXPECT_EQ(result.candidates[i], order[i]) << i;
        EXPECT_NEAR(result.scores[i], logp[size_t(result.candidates[i])], int8 ? 0.1 : 1e-4) << i;
      }
      // The forced first token: log-prob 0, nothing else.
      in.groups[0].forced_token = 11;
      engine->step(in, &result);
      EXPECT_EQ(result.candidates[0], 11);
      EXPECT_EQ(result.scores[0], 0.f);
      EXPECT_TRUE(std::isinf(result.scores[1]));
      in.groups[0].forced_token = c.vocab_size;
      try {
        engine->step(in, &result);
        ADD_FAILURE() << "a forced token outside the vocabulary was taken";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_HAS(e.what(), "forced first token id 20 is outside the vocabulary");
      }
    }
  }
}

// At the maximum length every hypothesis ends; EOS is forced there only where the model's
// generation config forces it (mBART-50's does, NLLB's and M2M-100's hub configs do not).
TEST(FamilyEngine, EosForcedAtTheLimitOnlyWhereTheModelForcesIt) {
  TinyFamilyModel m("m2m_100", 21);
  const std::vector<int> source = {5, 9, 13, 7, 2};
  DecodeOptions o;
  o.beam_size = 4;
  o.num_hypotheses = 4;
  o.max_decoding_length = 3;
  o.forced_bos_id = 11;
  auto decode = [&](const json& gen) {
    m.write_generation_config(gen);
    const ModelConfig c = m.config();
    const Weights w = Weights::load(m.dir(), c);
    auto engine = make_cpu_engine(c, w, 0, 1, false);
    return test::decode_ids(*engine, c, {source}, {o}).at(0);
  };
  const Translation forced = decode({{"decoder_start_token_id", 2}, {"forced_eos_token_id", 2}});
  const Translation free = decode({{"decoder_start_token_id", 2}});
  ASSERT_EQ(forced.hypotheses.size(), 4u);
  ASSERT_EQ(free.hypotheses.size(), 4u);
  int free_without_eos = 0;
  for (size_t h = 0; h < 4; ++h) {
    EXPECT_EQ(forced.hypotheses[h].ids.front(), 11);
    EXPECT_EQ(free.hypotheses[h].ids.front(), 11);
    EXPECT_EQ(forced.hypotheses[h].ids.back(), 2) << "hypothesis " << h;
    EXPECT_LE(free.hypotheses[h].ids.size(), 3u);
    free_without_eos += free.hypotheses[h].ids.size() == 3 && free.hypotheses[h].ids.back() != 2;
  }
  EXPECT_GT(free_without_eos, 0) << "no hypothesis reached the limit without </s>: the case is not exercised";
}
