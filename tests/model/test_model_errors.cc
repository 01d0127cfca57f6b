// Every bad model input gets a clear error naming the file, field or tensor at fault.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/config/model_config.h"
#include "model/config/safetensors.h"
#include "model/config/weights.h"
#include "model/decoding/decode_options.h"
#include "model/error.h"
#include "model/translator.h"
#include "tests/support/golden.h"

namespace fs = std::filesystem;
using namespace nmt;

namespace {

// A writable copy of the demo model in a fresh temp folder, for corrupting.
class ModelCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nmt-model-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(test::demo_model_dir(), dir_);
    for (auto& e : fs::directory_iterator(dir_)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(file(name), std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(file(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void edit_config(const std::function<void(nlohmann::json&)>& f) const {
    auto j = nlohmann::json::parse(read("config.json"));
    f(j);
    write("config.json", j.dump());
  }
  // Rewrites the safetensors header through `f`, keeping the data section.
  void edit_header(const std::function<void(nlohmann::json&)>& f) const {
    const std::string bytes = read("model.safetensors");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    auto header = nlohmann::json::parse(bytes.substr(8, n));
    f(header);
    const std::string h = header.dump();
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
    write("model.safetensors", len + h + bytes.substr(8 + n));
  }
  fs::path dir_;
};

// Runs the full load and returns the error message (or fails when none is thrown).
std::string load_error(const std::string& dir, ErrorCode* code = nullptr) {
  try {
    TranslatorOptions o;
    o.device = Device::kCpu;
    Translator::load(dir, o);
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  ADD_FAILURE() << "loading " << dir << " did not fail";
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

}  // namespace

TEST_F(ModelCopy, LoadsWhenIntact) {
  TranslatorOptions o;
  o.device = Device::kCpu;
  EXPECT_NO_THROW(Translator::load(dir_.string(), o));
}

TEST(ModelErrors, MissingDirectory) {
  ErrorCode code;
  const auto msg = load_error("/nonexistent/model-dir", &code);
  EXPECT_HAS(msg, "/nonexistent/model-dir/config.json");
  EXPECT_HAS(msg, "missing file");
  EXPECT_EQ(code, ErrorCode::kNotFound);
}

TEST_F(ModelCopy, MissingFiles) {
  for (const char* name : {"model.safetensors", "source.spm", "target.spm", "vocab.json"}) {
    const std::string saved = read(name);
    fs::remove(file(name));
    const auto msg = load_error(dir_.string());
    EXPECT_HAS(msg, file(name));
    EXPECT_HAS(msg, "missing file");
    write(name, saved);
  }
}

TEST_F(ModelCopy, TruncatedSafetensors) {
  const std::string bytes = read("model.safetensors");
  write("model.safetensors", bytes.substr(0, bytes.size() / 2));
  const auto msg = load_error(dir_.string());
  EXPECT_HAS(msg, file("model.safetensors"));
  EXPECT_HAS(msg, "truncated file?");
  write("model.safetensors", bytes.substr(0, 5));
  EXPECT_HAS(load_error(dir_.string()), "shorter than the 8-byte header length");
}

TEST_F(ModelCopy, CorruptSafetensorsHeader) {
  std::string bytes = read("model.safetensors");
  bytes[8] = '#';  // the JSON header's opening brace
  write("model.safetensors", bytes);
  const auto msg = load_error(dir_.string());
  EXPECT_HAS(msg, "corrupt safetensors file: header is not valid JSON");
  std::string huge(8, '\xff');
  write("model.safetensors", huge + "{}");
  EXPECT_HAS(load_error(dir_.string()), "exceeds the file size");
}

TEST_F(ModelCopy, MissingTensor) {
  edit_header([](nlohmann::json& h) { h.erase("model.decoder.layers.2.fc2.weight"); });
  ErrorCode code;
  const auto msg = load_error(dir_.string(), &code);
  EXPECT_HAS(msg, "missing tensor 'model.decoder.layers.2.fc2.weight'");
  EXPECT_HAS(msg, file("model.safetensors"));
  EXPECT_EQ(code, ErrorCode::kNotFound);
}

TEST_F(ModelCopy, WrongShape) {
  edit_header([](nlohmann::json& h) {
    auto& t = h["model.encoder.layers.0.fc1.bias"];  // [1024] -> [512, 2]: same bytes, wrong shape
    t["shape"] = {512, 2};
  });
  const auto msg = load_error(dir_.string());
  EXPECT_HAS(msg, "tensor 'model.encoder.layers.0.fc1.bias' has shape [512, 2], expected [1024]");
}

TEST_F(ModelCopy, WrongDtype) {
  edit_header([](nlohmann::json& h) { h["model.encoder.layers.0.fc1.bias"]["dtype"] = "I64"; });
  EXPECT_HAS(load_error(dir_.string()), "tensor 'model.encoder.layers.0.fc1.bias' has unsupported dtype I64");
  edit_header([](nlohmann::json& h) { h["model.encoder.layers.0.fc1.bias"]["dtype"] = "F32"; });
  EXPECT_HAS(load_error(dir_.string()), "has 2048 bytes but its shape needs 4096");
}

TEST_F(ModelCopy, DataOffsetsOutsideFile) {
  edit_header([](nlohmann::json& h) { h["final_logits_bias"]["data_offsets"] = {0, 1u << 30}; });
  EXPECT_HAS(load_error(dir_.string()), "tensor 'final_logits_bias' data [0, 1073741824) lies outside");
}

TEST_F(ModelCopy, UnsupportedConfigValues) {
  edit_config([](nlohmann::json& j) { j["activation_function"] = "tanh"; });
  EXPECT_HAS(load_error(dir_.string()), "unsupported field 'activation_function' = 'tanh'");
  edit_config([](nlohmann::json& j) {
    j["activation_function"] = "swish";
    j["model_type"] = "bert";
  });
  EXPECT_HAS(load_error(dir_.string()), "unsupported field 'model_type' = 'bert'");
  edit_config([](nlohmann::json& j) {
    j["model_type"] = "marian";
    j.erase("d_model");
  });
  EXPECT_HAS(load_error(dir_.string()), "missing field 'd_model'");
  edit_config([](nlohmann::json& j) {
    j["d_model"] = 256;
    j["encoder_attention_heads"] = 3;
  });
  EXPECT_HAS(load_error(dir_.string()), "field 'encoder_attention_heads' must divide 'd_model'");
  write("config.json", "{not json");
  const auto msg = load_error(dir_.string());
  EXPECT_HAS(msg, file("config.json"));
  EXPECT_HAS(msg, "not valid JSON");
}

// Each config.json value the engines do not compute as transformers' Marian would is refused
// at load with one line naming the field.
TEST_F(ModelCopy, RefusedConfigFieldsAreNamed) {
  const std::string original = read("config.json");
  const std::vector<std::pair<std::string, nlohmann::json>> refused = {
      {"normalize_before", true},
      {"add_final_layer_norm", true},
      {"normalize_embedding", true},
      {"layernorm_embedding", true},
      {"static_position_embeddings", false},
      {"add_bias_logits", true},
      {"is_decoder", true},
      {"is_encoder_decoder", false},
      {"architectures", {"MarianForCausalLM"}},
      {"activation_function", "gelu_new"},
      {"forced_eos_token_id", 5},
      {"share_encoder_decoder_embeddings", "no"},
      {"tie_word_embeddings", 0},
  };
  for (const auto& [field, value] : refused) {
    write("config.json", original);
    edit_config([&, &field = field, &value = value](nlohmann::json& j) { j[field] = value; });
    const std::string msg = load_error(dir_.string());
    EXPECT_HAS(msg, "'" + field + "'");
    EXPECT_HAS(msg, file("config.json"));
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Several at once: all named, in one line.
  write("config.json", original);
  edit_config([](nlohmann::json& j) {
    j["normalize_before"] = true;
    j["normalize_embedding"] = true;
  });
  EXPECT_HAS(load_error(dir_.string()), "unsupported fields 'normalize_before' = true (Marian models are post-norm), "
                                        "'normalize_embedding' = true (Marian has no embedding layer norm)");
  // Their Marian values load.
  write("config.json", original);
  edit_config([](nlohmann::json& j) {
    j["normalize_before"] = false;
    j["static_position_embeddings"] = true;
    j["add_bias_logits"] = false;
    j["architectures"] = {"MarianMTModel"};
    j["forced_eos_token_id"] = nullptr;
  });
  TranslatorOptions o;
  o.device = Device::kCpu;
  EXPECT_NO_THROW(Translator::load(dir_.string(), o));
}

// A target vocabulary of its own needs the files and tensors that carry it.
TEST_F(ModelCopy, SeparateVocabularyNeedsItsFiles) {
  edit_config([](nlohmann::json& j) {
    j["share_encoder_decoder_embeddings"] = false;
    j["decoder_vocab_size"] = 8002;
  });
  EXPECT_HAS(load_error(dir_.string()), "field 'decoder_vocab_size' (8002) differs from 'vocab_size' (8001)");
  write("target_vocab.json", read("vocab.json"));
  write("tokenizer_config.json", R"({"separate_vocabs": true})");
  EXPECT_HAS(load_error(dir_.string()), "missing tensor 'model.decoder.embed_tokens.weight'");
  edit_header([](nlohmann::json& h) { h["model.decoder.embed_tokens.weight"] = h["model.shared.weight"]; });
  EXPECT_HAS(load_error(dir_.string()),
             "tensor 'model.decoder.embed_tokens.weight' has shape [8001, 256], expected [8002, 256]");
  write("tokenizer_config.json", R"({"separate_vocabs": "yes"})");
  EXPECT_HAS(load_error(dir_.string()), "field 'separate_vocabs' must be true or false");
}

// tie_word_embeddings: false needs lm_head.weight; true refuses an lm_head.weight that is not
// the decoder embeddings (transformers would silently use one of the two).
TEST_F(ModelCopy, OutputProjectionFollowsTieWordEmbeddings) {
  edit_config([](nlohmann::json& j) { j["tie_word_embeddings"] = false; });
  EXPECT_HAS(load_error(dir_.string()), "missing tensor 'lm_head.weight' (config.json field 'tie_word_embeddings' is false)");
  edit_header([](nlohmann::json& h) {
    h["lm_head.weight"] = h["model.shared.weight"];
    h["lm_head.weight"]["data_offsets"][0] = h["lm_head.weight"]["data_offsets"][0].get<int64_t>() - 2;  // a shifted view: other values
    h["lm_head.weight"]["data_offsets"][1] = h["lm_head.weight"]["data_offsets"][1].get<int64_t>() - 2;  // a shifted view: other values
  });
  TranslatorOptions o;
  o.device = Device::kCpu;
  EXPECT_NO_THROW(Translator::load(dir_.string(), o));
  edit_config([](nlohmann::json& j) { j["tie_word_embeddings"] = true; });
  EXPECT_HAS(load_error(dir_.string()), "'lm_head.weight' differs from the decoder embeddings, but config.json field "
                                        "'tie_word_embeddings' is true");
}

TEST_F(ModelCopy, CorruptTokenizerFiles) {
  write("source.spm", "not a sentencepiece model");
  EXPECT_HAS(load_error(dir_.string()), "not a valid SentencePiece model");
  fs::copy_file(test::demo_model_dir() + "/source.spm", file("source.spm"), fs::copy_options::overwrite_existing);
  write("vocab.json", R"({"<unk>": 1, "</s>": 0, "<pad>": 99999})");
  EXPECT_HAS(load_error(dir_.string()), "id 99999 of piece '<pad>' is outside the model's vocab_size 8001");
}

TEST(DecodeOptionsErrors, EachOptionNamed) {
  auto message = [](DecodeOptions o) {
    try {
      o.validate(16, 256);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  DecodeOptions o;
  EXPECT_EQ(message(o), "no error");
  o.beam_size = 0;
  EXPECT_EQ(message(o), "beam_size must be between 1 and 16, got 0");
  o.beam_size = 17;
  EXPECT_EQ(message(o), "beam_size must be between 1 and 16, got 17");
  o = DecodeOptions{};
  o.num_hypotheses = 5;
  EXPECT_EQ(message(o), "num_hypotheses must be between 1 and beam_size (4), got 5");
  o = DecodeOptions{};
  o.max_decoding_length = 300;
  EXPECT_EQ(message(o), "max_decoding_length must be between 1 and 256, got 300");
  o = DecodeOptions{};
  o.min_decoding_length = o.max_decoding_length;
  EXPECT_EQ(message(o), "min_decoding_length must be between 0 and max_decoding_length - 1 (254), got 255");
  o = DecodeOptions{};
  o.length_penalty = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(message(o), "length_penalty must be a finite number");
  o = DecodeOptions{};
  o.forced_bos_id = -2;
  EXPECT_EQ(message(o), "forced_bos_id must be a token id or -1, got -2");
}

TEST(TranslateErrors, BadSourceIds) {
  TranslatorOptions o;
  o.device = Device::kCpu;
  auto t = Translator::load(test::demo_model_dir(), o);
  try {
    t->translate_ids({{5, 99999, 0}}, DecodeOptions{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "token id 99999 is outside the vocabulary");
  }
  try {
    t->translate_ids({std::vector<int>(300, 5)}, DecodeOptions{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "source sentence has 300 tokens; the model accepts at most 256");
  }
  try {
    t->translate_ids({{}}, DecodeOptions{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "empty source sentence");
  }
}

// Inputs the config fuzzer found: out-of-range numbers and wrongly typed fields are refused
// with a message, not an escaping JSON exception.
TEST(ModelConfigErrors, FuzzerFindings) {
  auto message = [](const std::string& text) {
    try {
      ModelConfig::parse(text, "cfg.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_HAS(message(R"({"model_type": "marian", "d_model": 77777777e777777777770})"), "cfg.json: not valid JSON");
  EXPECT_HAS(message(R"({"model_type": 5})"), "cfg.json: unsupported field 'model_type' = ''");
  const auto base = nlohmann::json::parse(R"({"model_type": "marian", "d_model": 8, "encoder_layers": 1,
      "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 4,
      "decoder_ffn_dim": 4, "vocab_size": 10, "pad_token_id": 9, "eos_token_id": 0,
      "max_position_embeddings": 16, "activation_function": "relu"})");
  EXPECT_EQ(message(base.dump()), "no error");
  auto bad = base;
  bad["activation_function"] = 3;
  EXPECT_HAS(message(bad.dump()), "cfg.json: invalid field value");
  bad = base;
  bad["d_model"] = -8;
  EXPECT_HAS(message(bad.dump()), "field 'd_model' has unsupported value -8");
}
