#include "server/pipeline/request_languages.h"

#include "model/error.h"
#include "model/tokenizer/languages.h"
#include "server/pipeline/language_detection.h"

namespace nmt::server {

namespace {

// The source language a request names, or, for "auto", the one CLD2 reads in its texts; a
// bilingual model has one source language, which "auto" then means without detection.
std::string requested_source(const v1::TranslateRequest& request, const ServedModel& model) {
  const std::string& source = request.options().source_language();
  if (source != kAutoLanguage) return source;
  if (!model.languages.multilingual()) return "";
  const std::vector<std::string> texts(request.texts().begin(), request.texts().end());
  std::vector<std::string> among;  // the model's languages as CLD2 names them
  for (const std::string& code : model.languages.codes) {
    const std::string iso = describe_language(code).iso639_1;
    if (!iso.empty()) among.push_back(iso);
  }
  return detect_source_language(texts, "options.source_language", among);
}

}  // namespace

RequestLanguages resolve_request_languages(const v1::TranslateRequest& request, const ServedModel& model) {
  const v1::TranslateOptions& options = request.options();
  // Every translator of a model holds the same tokenizer and config: the first one answers.
  const Translator& translator = *model.replicas.front()->translators.front();
  RequestLanguages out;
  const std::string detected = requested_source(request, model);
  std::string source;
  try {
    source = translator.resolve_source(detected);
  } catch (const Error& e) {
    if (options.source_language() != kAutoLanguage) throw;
    throw Error(ErrorCode::kInvalidArgument, "options.source_language auto: the texts read as " +
                                                 detected + ", which model " + model.name +
                                                 " does not translate from (" + e.what() + ")");
  }
  out.forced_bos_id = translator.target_token(options.target_language());
  if (!model.languages.multilingual()) {
    out.split_locale = model.languages.source;  // the folder's pair: ISO 639 already
    return out;
  }
  out.encode_language = source;
  // The language split_sentences cuts by: the request's, else the model's default source.
  const LanguageInfo info = describe_language(source.empty() ? model.languages.source : source);
  out.split_locale = !info.iso639_1.empty() ? info.iso639_1 : info.iso639_3;
  return out;
}

}  // namespace nmt::server
