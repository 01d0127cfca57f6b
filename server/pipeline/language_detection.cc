#include "server/pipeline/language_detection.h"

#include <cld2/public/compact_lang_det.h>

#include <algorithm>

#include "model/error.h"
#include "server/pipeline/request_validator.h"
#include "model/text/excerpt.h"

namespace nmt::server {
namespace {

// CLD2 keeps a few withdrawn ISO 639-1 codes; the tables of model/tokenizer/ know the current.
std::string iso_code(CLD2::Language language) {
  const std::string code = CLD2::LanguageCode(language);
  if (code == "iw") return "he";
  if (code == "jw") return "jv";
  return code;
}

}  // namespace

Detection detect_language(const std::string& text, const std::vector<std::string>& among) {
  // CLD2's fast entry point reads only valid UTF-8; anything else tells no language.
  if (find_invalid_utf8(text) != std::string::npos) return {};
  CLD2::Language languages[3];
  int percents[3];
  int text_bytes = 0;
  bool reliable = false;
  CLD2::ExtDetectLanguageSummary(text.data(), static_cast<int>(text.size()), /*is_plain_text=*/true,
                                 languages, percents, &text_bytes, &reliable);
  Detection out;
  for (int i = 0; i < 3; ++i) {
    if (languages[i] == CLD2::UNKNOWN_LANGUAGE || percents[i] <= 0) continue;
    const std::string code = iso_code(languages[i]);
    if (!among.empty() && std::find(among.begin(), among.end(), code) == among.end()) continue;
    out.candidates.push_back({code, static_cast<double>(percents[i])});
  }
  out.reliable = reliable && !out.candidates.empty();
  return out;
}

std::string detect_source_language(const std::vector<std::string>& texts, const std::string& field,
                                   const std::vector<std::string>& among) {
  std::string all;
  for (const std::string& text : texts) all += text + "\n";
  const Detection detection = detect_language(all, among);
  if (!detection.reliable) {
    throw Error(ErrorCode::kInvalidArgument,
                field + " auto: cannot tell the language of \"" + text_excerpt(texts.empty() ? "" : texts[0]) +
                    "\" (too short, or mixed); name the source language");
  }
  return detection.candidates.front().code;
}

}  // namespace nmt::server
