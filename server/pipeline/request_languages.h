#pragma once
// A request's source and target languages (TranslateOptions.source_language,
// target_language) against the model it was admitted to: what its tokenization, its
// sentence splitting and its decode options need. Resolved once per request, before any
// text is tokenized; each request's sentences carry their own forced first token, so that
// requests for different target languages share one decode loop's steps.
#include <string>

#include "nmt/v1/translation.pb.h"
#include "server/repository/served_model.h"

namespace nmt::server {

struct RequestLanguages {
  // The code Tokenizer::encode takes: the model's code of the requested source language, ""
  // for the model's default (and always for a bilingual model).
  std::string encode_language;
  // DecodeOptions::forced_bos_id: the target language's token (M2M-100 / NLLB / mBART-50),
  // the model's forced_bos_token_id when the request names none, -1 for Marian.
  int forced_bos_id = -1;
  // The ICU locale of split_sentences' rules (the source language's ISO 639 code), "" for
  // ICU's root rules.
  std::string split_locale;
};

// source_language "auto": the language of the request's texts (language_detection.h), then
// resolved as a named one; a bilingual model's own source without detection.
inline constexpr const char* kAutoLanguage = "auto";

// Throws nmt::Error(kInvalidArgument) naming the option (source_language / target_language)
// and listing the model's languages: an unknown or ambiguous language, one the model lacks,
// a bilingual model asked for another pair, no target for a multilingual model without a
// default, "auto" on texts whose language cannot be told (or one the model lacks).
RequestLanguages resolve_request_languages(const v1::TranslateRequest& request, const ServedModel& model);

}  // namespace nmt::server
