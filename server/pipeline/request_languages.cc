#include "server/pipeline/request_languages.h"

#include "model/tokenizer/languages.h"

namespace nmt::server {

RequestLanguages resolve_request_languages(const v1::TranslateOptions& options, const ServedModel& model) {
  // Every translator of a model holds the same tokenizer and config: the first one answers.
  const Translator& translator = *model.replicas.front()->translators.front();
  RequestLanguages out;
  const std::string source = translator.resolve_source(options.source_language());
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
