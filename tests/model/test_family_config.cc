// The M2M-100 / NLLB-200 and mBART-50 families beside Marian (issue 51), without the
// conformance data: the architecture each family gets, config.json / generation_config.json
// parsing and refusals, the position tables, the forced first token in the candidates and
// the host search.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config/architecture.h"
#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cpu/candidates.h"
#include "model/decoding/beam_search.h"
#include "model/error.h"
#include "tests/model/family_config.h"

using namespace nmt;
using nlohmann::json;
using nmt::test::family_config;

namespace {

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
