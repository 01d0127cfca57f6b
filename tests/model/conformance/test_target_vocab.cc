// A decoder vocabulary of another size than the encoder's (decoder_vocab_size !=
// vocab_size), end to end on the CPU engine: the separate_vocab conformance model with nine
// target tokens appended that can never win (final_logits_bias -1e9, so exp() of their
// log-probs is exactly 0) must still translate exactly as transformers did.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/config/safetensors.h"
#include "model/config/weights.h"
#include "model/translator.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"

namespace fs = std::filesystem;
using namespace nmt;

namespace {

constexpr int kExtra = 9;

// Writes the tensors as a float32 safetensors file.
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.data.size() * 4}}};
    data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
  }
  const std::string h = header.dump();
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << len << h << data;
}

}  // namespace

TEST(TargetVocabulary, LargerDecoderVocabularyTranslatesTheSame) {
  const std::string src = test::conformance_dir() + "/models/separate_vocab";
  const fs::path dir = fs::temp_directory_path() / ("nmt-target-vocab-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(src, dir);
  for (auto& e : fs::directory_iterator(dir)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);

  auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  const int64_t tv = config.at("decoder_vocab_size").get<int64_t>(), grown = tv + kExtra;
  config["decoder_vocab_size"] = grown;
  std::ofstream(dir / "config.json", std::ios::trunc) << config.dump();
  auto target = nlohmann::json::parse(std::ifstream(dir / "target_vocab.json"));
  for (int i = 0; i < kExtra; ++i) target["<extra" + std::to_string(i) + ">"] = tv + i;
  std::ofstream(dir / "target_vocab.json", std::ios::trunc) << target.dump();

  SafetensorsFile file((dir / "model.safetensors").string());
  std::map<std::string, HostTensor> tensors;
  for (const auto& [name, e] : file.entries()) tensors[name] = HostTensor{e.shape, file.read_float(name)};
  for (const char* rows : {"model.decoder.embed_tokens.weight", "lm_head.weight"}) {
    HostTensor& t = tensors.at(rows);
    ASSERT_EQ(t.shape[0], tv) << rows;
    t.shape[0] = grown;
    t.data.resize(size_t(grown * t.shape[1]), 0.5f);
  }
  HostTensor& bias = tensors.at("final_logits_bias");
  bias.shape[1] = grown;
  bias.data.resize(size_t(grown), -1e9f);
  write_safetensors((dir / "model.safetensors").string(), tensors);

  TranslatorOptions o;
  o.device = Device::kCpu;
  auto translator = Translator::load(dir.string(), o);
  ASSERT_EQ(translator->config().target_vocab_size, grown);
  ASSERT_NE(translator->config().target_vocab_size, translator->config().vocab_size);
  const std::string refs_path = src + "/references.jsonl";
  const auto refs = test::load_references(refs_path);
  for (test::Search s : {test::Search::kGreedy, test::Search::kBeam4}) {
    const auto c = test::compare(*translator, refs, s, 16, test::reference_max_decoding_length(refs_path));
    EXPECT_EQ(c.identical, c.sentences) << c.first_difference;
    EXPECT_EQ(c.texts_differ, 0) << c.first_text_difference;
  }
  fs::remove_all(dir);
}
