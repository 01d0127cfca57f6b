#pragma once
// The language of a text, for source_language "auto" (gRPC, /v1) and LibreTranslate's
// `source: auto` and POST /detect: Debian's CLD2 (libcld2-dev), the detector Chromium used,
// with ~80 languages in its default tables, no model files to ship and microseconds a
// sentence (README, libraries). Its codes are ISO 639-1 ("en", "de"; "he" and "jv" where CLD2
// still says "iw" and "jw"), which model/tokenizer/languages.h resolves to a model's codes.
#include <string>
#include <vector>

namespace nmt::server {

struct DetectedLanguage {
  std::string code;   // ISO 639-1 where the language has one, else CLD2's code
  double confidence;  // 0 to 100: the share of the text's letters CLD2 gives this language
};

struct Detection {
  std::vector<DetectedLanguage> candidates;  // best first, at most 3; empty: none told
  // CLD2's own verdict: enough text, and a clear lead over the next language. A short or
  // mixed text is not reliable.
  bool reliable = false;
};

// `among`: the codes the answer may give (the served languages' ISO 639-1 codes), every
// language when empty. Close languages share much of CLD2's evidence (Spanish and Galician,
// Dutch and Afrikaans), so a text the models can take is read as the served one among CLD2's
// three candidates, as LibreTranslate detects among its installed languages.
// Thread-safe; a text that is not valid UTF-8 tells no language.
Detection detect_language(const std::string& text, const std::vector<std::string>& among = {});

// The detected source language for `texts` together (one request has one source language):
// the best candidate's code among `among`. Throws nmt::Error(kInvalidArgument) naming `field`
// and the start of the text when CLD2 cannot tell reliably, asking for the language by name.
std::string detect_source_language(const std::vector<std::string>& texts, const std::string& field,
                                   const std::vector<std::string>& among = {});

}  // namespace nmt::server
