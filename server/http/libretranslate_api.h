#pragma once
// LibreTranslate's API (POST /translate, POST /detect, GET /languages) over nmt-serve's models, as the
// tools that speak it expect: the same field names, response shapes, error bodies
// {"error": "..."} and status codes (400 bad request, 403 wrong API key, 429 busy, 500).
// This file holds the mapping only (no HTTP server): server/http/http_api.cc serves it.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nmt/v1/translation.pb.h"
#include "server/repository/model_languages.h"

namespace nmt::server {

// A refusal with LibreTranslate's status code and message.
struct LibreTranslateError {
  int status;
  std::string message;
};

// A served model and its languages (a bilingual model whose pair is unknown, or a
// multilingual one that lists no code, is not listed).
struct LanguageModel {
  std::string model;
  ModelLanguages languages;
};

// A /translate request, decoded from JSON or form fields.
struct LibreTranslateRequest {
  std::vector<std::string> q;
  bool batch = false;  // q was a list: translatedText is a list too
  std::string source, target, format = "text", api_key;
  std::string alternatives_text;  // as sent
  int alternatives = 0;           // once checked
  // source "auto": what detect_source() read (LibreTranslate's detectedLanguage), or the one
  // source language the target can be reached from (confidence 100, no detection).
  std::string detected_language;
  double detected_confidence = 0;
};

class LibreTranslateApi {
 public:
  explicit LibreTranslateApi(std::vector<LanguageModel> models);

  // The fields of a JSON body (is_json) or of the form (`form`: name -> first value).
  // Throws LibreTranslateError (400) only for a body that is not a JSON object or fields of
  // the wrong type: the API key is checked before the other fields, as LibreTranslate does.
  LibreTranslateRequest parse(bool is_json, const std::string& body,
                              const std::map<std::string, std::string>& form) const;
  // What LibreTranslate refuses (400): a missing q, source or target, a format other than
  // text or html, a non-number alternatives (and alternatives with html). Fills `alternatives`.
  void check(LibreTranslateRequest& request) const;
  // source "auto": the language of q (server/pipeline/language_detection.h) becomes the
  // request's source, unless only one source language reaches its target (then that one).
  // Throws LibreTranslateError (400) naming the text when its language cannot be told.
  void detect_source(LibreTranslateRequest& request) const;
  // POST /detect: [{"confidence": 90.0, "language": "en"}, ...], CLD2's candidates among the
  // languages /languages lists, best first (a list of such lists for a list q). 400 naming
  // the text when none can be told.
  std::string detect_json(const LibreTranslateRequest& request) const;
  // The TranslateRequest for the model of the request's language pair (sentences split: the
  // texts are paragraphs): a bilingual model of that pair, else the first multilingual model
  // that has both languages (their names resolved as TranslateOptions' are, which the
  // request then carries). Throws LibreTranslateError (400) for an unsupported language or
  // pair (source "auto" must have gone through detect_source()).
  v1::TranslateRequest to_request(const LibreTranslateRequest& request) const;
  // {"translatedText": ...} (a string, or a list for a list q), with "alternatives" when asked
  // and "detectedLanguage" for source "auto".
  std::string response_json(const LibreTranslateRequest& request,
                            const v1::TranslateResponse& response) const;
  // GET /languages: [{"code", "name" (English), "targets"}], sorted by code. A multilingual
  // model's languages are listed by their ISO 639-1 code where that names one of its codes
  // alone (deu_Latn as "de"), else by the model's code (zho_Hans), each with every other.
  std::string languages_json() const;

  static std::string error_json(const std::string& message);

 private:
  // Every language the models serve as /languages lists it, with the languages it goes to.
  std::map<std::string, std::set<std::string>> listing() const;

  std::vector<LanguageModel> models_;
};

// An English name for an ISO 639 code ("de" -> "German"), from ICU; the code itself when
// ICU does not know it.
std::string language_name(const std::string& code);

}  // namespace nmt::server
