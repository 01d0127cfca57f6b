#pragma once
// The tokenizer schemes behind Tokenizer::load (model/tokenizer/tokenizer.cc picks one from
// tokenizer_config.json's tokenizer_class). Internal to model/.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config/model_config.h"
#include "model/tokenizer/tokenizer.h"

namespace nmt {

// The fairseq-dictionary tokenizers, as transformers' classes of the same names.
enum class FairseqScheme {
  kNllb,     // NllbTokenizer: spm ids + 1, codes like deu_Latn; [lang] X </s> (legacy: X </s> [lang])
  kM2M100,   // M2M100Tokenizer: vocab.json over the spm pieces, codes __de__; [lang] X </s>
  kMBart50,  // MBart50Tokenizer: spm ids + 1, codes like de_DE; [lang] X </s>
};

// tokenizer_config is tokenizer_config.json's object (empty when the folder has none).
std::unique_ptr<Tokenizer> load_marian_tokenizer(const std::string& model_dir, const ModelConfig& config,
                                                 const nlohmann::json& tokenizer_config);
std::unique_ptr<Tokenizer> load_fairseq_tokenizer(const std::string& model_dir, const ModelConfig& config,
                                                  FairseqScheme scheme, const nlohmann::json& tokenizer_config);

}  // namespace nmt
