#pragma once
// The languages of a model folder, for ListModels, the LibreTranslate API's /languages and
// sentence splitting (the source language's abbreviations). A multilingual model (NLLB-200,
// M2M-100, mBART-50) lists its codes from its tokenizer files, read without loading the
// engine, so that the repository lists them before the model loads. A bilingual (Marian)
// model's pair: Hugging Face exports name it in tokenizer_config.json (source_lang,
// target_lang); otherwise the folder name or the model's name does, as OPUS-MT names do:
// opus-mt-en-de, m30k-en-de-small.
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/tokenizer/tokenizer.h"

namespace nmt::server {

struct ModelLanguages {
  // A bilingual model's pair (ISO 639 codes); a multilingual model's defaults, what a request
  // that names no language gets (tokenizer_config.json's src_lang; the code of the model's
  // forced_bos_token_id). "" when unknown or none.
  std::string source;
  std::string target;
  // A multilingual model's codes as its tokenizer spells them (deu_Latn, de, de_DE), in id
  // order; empty for a bilingual model.
  std::vector<std::string> codes;
  bool multilingual() const { return !codes.empty(); }
  // A bilingual model whose pair is known.
  bool known_pair() const { return !multilingual() && !source.empty() && !target.empty(); }
};

// From `model_dir`: a multilingual model's codes from its tokenizer (config.json's
// model_type m2m_100 or mbart; empty when its files do not load: the model's load says why);
// else tokenizer_config.json's pair, else the last "xx-yy" (two or three lowercase letters
// each, between dashes, underscores or the ends) of the folder's name, then of `model_name`;
// unknown (empty) when none says.
ModelLanguages model_languages(const std::string& model_dir, const std::string& model_name);

// A loaded multilingual model's languages from its tokenizer and config.
ModelLanguages multilingual_languages(const Tokenizer& tokenizer, const ModelConfig& config);

// A bilingual pair from a name alone ("opus-mt-tc-big-en-de" -> en, de).
ModelLanguages languages_in_name(const std::string& name);

}  // namespace nmt::server
