// Tokenizer::load picks the scheme; the language-code lookups every scheme shares.
#include "model/tokenizer.h"

#include <algorithm>

#include "model/error.h"
#include "model/tokenizer_files.h"
#include "model/tokenizer_schemes.h"

namespace nmt {

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir, const ModelConfig& config) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const nlohmann::json tokenizer_config = tokenizer_files::read_optional_object(config_path, "tokenizer config");
  std::string cls = tokenizer_files::string_field(tokenizer_config, "tokenizer_class", "", config_path);
  // transformers 4's fast twins load as the same scheme.
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  if (cls == "MarianTokenizer") return load_marian_tokenizer(model_dir, config, tokenizer_config);
  if (cls == "NllbTokenizer") return load_fairseq_tokenizer(model_dir, config, FairseqScheme::kNllb, tokenizer_config);
  if (cls == "M2M100Tokenizer") return load_fairseq_tokenizer(model_dir, config, FairseqScheme::kM2M100, tokenizer_config);
  if (cls == "MBart50Tokenizer") return load_fairseq_tokenizer(model_dir, config, FairseqScheme::kMBart50, tokenizer_config);
  if (!cls.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                config_path + ": field 'tokenizer_class' is '" + cls +
                    "'; supported: MarianTokenizer, NllbTokenizer, M2M100Tokenizer, MBart50Tokenizer");
  }
  // Marian exports older than tokenizer_class, and hand-made folders: Marian's files say it.
  if (tokenizer_files::exists(model_dir + "/source.spm")) return load_marian_tokenizer(model_dir, config, tokenizer_config);
  throw Error(ErrorCode::kInvalidArgument,
              config_path + ": no field 'tokenizer_class' (and no source.spm of a Marian model): cannot tell the "
                            "tokenizer (NllbTokenizer, M2M100Tokenizer, MBart50Tokenizer?)");
}

int Tokenizer::language_token(const std::string& code) const {
  const auto it = std::find(languages_.begin(), languages_.end(), code);
  return it == languages_.end() ? -1 : language_ids_[size_t(it - languages_.begin())];
}

int Tokenizer::require_language_token(const std::string& code) const {
  const int id = language_token(code);
  if (id >= 0) return id;
  std::string known;
  for (const auto& c : languages_) known += (known.empty() ? "" : ", ") + c;
  throw Error(ErrorCode::kInvalidArgument,
              "language '" + code + "' is not a code of this model" +
                  (known.empty() ? std::string(" (a bilingual model takes no language code)") : " (it has: " + known + ")"));
}

}  // namespace nmt
