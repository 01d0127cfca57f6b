#pragma once
// The language pair of a model folder, for sentence splitting (the source language's
// abbreviations) and the LibreTranslate API's /languages. Hugging Face Marian exports name
// it in tokenizer_config.json (source_lang, target_lang); otherwise the folder name or the
// model's name does, as OPUS-MT names do: opus-mt-en-de, m30k-en-de-small.
#include <string>

namespace nmt::server {

struct LanguagePair {
  std::string source;  // ISO 639 code, "" when unknown
  std::string target;
  bool known() const { return !source.empty() && !target.empty(); }
};

// From `model_dir`/tokenizer_config.json, else the last "xx-yy" (two or three lowercase
// letters each, between dashes, underscores or the ends) of the folder's name, then of
// `model_name`; unknown (empty) when none says.
LanguagePair model_languages(const std::string& model_dir, const std::string& model_name);

// The same from a name alone ("opus-mt-tc-big-en-de" -> en, de).
LanguagePair languages_in_name(const std::string& name);

}  // namespace nmt::server
