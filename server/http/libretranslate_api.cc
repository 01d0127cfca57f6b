#include "server/http/libretranslate_api.h"

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "model/error.h"
#include "model/tokenizer/languages.h"
#include "server/pipeline/language_detection.h"
#include "model/text/excerpt.h"

namespace nmt::server {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad_request(const std::string& message) {
  throw LibreTranslateError{400, message};
}

std::string missing(const char* name) {
  return std::string("Invalid request: missing ") + name + " parameter";
}

// A string field of the JSON body; "" when absent or null.
std::string json_string(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return "";
  if (!it->is_string()) bad_request(std::string("Invalid request: ") + name + " must be a string");
  return it->get<std::string>();
}

int parse_alternatives(const std::string& text) {
  if (text.empty()) return 0;
  try {
    size_t used = 0;
    const int n = std::stoi(text, &used);
    if (used == text.size()) return std::max(0, n);
  } catch (const std::exception&) {
  }
  bad_request("Invalid request: alternatives parameter is not a number");
}

// The code /languages lists a multilingual model's `code` by: its ISO 639-1 alias where that
// resolves to it alone among the model's codes, so that LibreTranslate's clients find the
// codes they know ("de"), else the model's own ("zho_Hans" beside "zho_Hant").
std::string listed_code(const std::string& code, const std::vector<std::string>& codes) {
  const std::string alias = describe_language(code).iso639_1;
  if (alias.empty()) return code;
  try {
    return resolve_language(alias, codes) == code ? alias : code;
  } catch (const Error&) {
    return code;
  }
}

// The model's code for a requested language, "" when it has none (or several: `why` says).
std::string model_code(const std::string& requested, const std::vector<std::string>& codes, std::string* why) {
  try {
    return resolve_language(requested, codes);
  } catch (const Error& e) {
    if (why->empty()) *why = e.what();
    return "";
  }
}

[[noreturn]] void undetectable(const std::string& text) {
  bad_request("Cannot detect the language of \"" + text_excerpt(text) +
              "\" (too short, or mixed): name the source language");
}

json detection_json(const Detection& detection) {
  json out = json::array();
  for (const DetectedLanguage& d : detection.candidates) {
    out.push_back({{"confidence", d.confidence}, {"language", d.code}});
  }
  return out;
}

}  // namespace

std::string language_name(const std::string& code) {
  icu::UnicodeString name;
  icu::Locale(code.c_str()).getDisplayLanguage(icu::Locale::getEnglish(), name);
  std::string out;
  name.toUTF8String(out);
  return out.empty() ? code : out;
}

LibreTranslateApi::LibreTranslateApi(std::vector<LanguageModel> models) {
  for (LanguageModel& m : models) {
    if (m.languages.known_pair() || m.languages.multilingual()) models_.push_back(std::move(m));
  }
}

std::string LibreTranslateApi::error_json(const std::string& message) {
  // Messages may quote a client's bytes: invalid UTF-8 is replaced, not thrown on.
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

LibreTranslateRequest LibreTranslateApi::parse(
    bool is_json, const std::string& body, const std::map<std::string, std::string>& form) const {
  LibreTranslateRequest r;
  if (is_json) {
    const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) bad_request("Invalid JSON format");
    const auto q = parsed.find("q");
    if (q != parsed.end() && q->is_string()) {
      if (!q->get<std::string>().empty()) r.q.push_back(q->get<std::string>());
    } else if (q != parsed.end() && q->is_array()) {
      r.batch = true;
      for (const json& text : *q) {
        if (!text.is_string())
          bad_request("Invalid request: q must be a string or a list of strings");
        r.q.push_back(text.get<std::string>());
      }
    } else if (q != parsed.end() && !q->is_null()) {
      bad_request("Invalid request: q must be a string or a list of strings");
    }
    r.source = json_string(parsed, "source");
    r.target = json_string(parsed, "target");
    r.format = json_string(parsed, "format");
    r.api_key = json_string(parsed, "api_key");
    // The npm registry's `libretranslate` client sends its key as apiKey (tests/browser).
    if (r.api_key.empty()) r.api_key = json_string(parsed, "apiKey");
    const auto alt = parsed.find("alternatives");
    if (alt != parsed.end() && !alt->is_null()) {
      // Anything but an integer or a string fails check() as "not a number".
      r.alternatives_text = alt->is_number_integer() ? std::to_string(alt->get<int64_t>())
                            : alt->is_string()       ? alt->get<std::string>()
                                                     : std::string("-");
    }
  } else {
    auto field = [&](const char* name) {
      const auto it = form.find(name);
      return it == form.end() ? std::string() : it->second;
    };
    if (!field("q").empty()) r.q.push_back(field("q"));
    r.source = field("source");
    r.target = field("target");
    r.format = field("format");
    r.api_key = field("api_key");
    r.alternatives_text = field("alternatives");
  }
  return r;
}

void LibreTranslateApi::check(LibreTranslateRequest& r) const {
  // LibreTranslate's order of checks and messages.
  if (r.q.empty()) bad_request(missing("q"));
  if (r.source.empty()) bad_request(missing("source"));
  if (r.target.empty()) bad_request(missing("target"));
  r.alternatives = parse_alternatives(r.alternatives_text);
  if (r.format.empty()) r.format = "text";
  // html: the markup kept, each tag around the words it covered (server/markup).
  if (r.format != "text" && r.format != "html") bad_request(r.format + " format is not supported");
  if (r.format == "html" && r.alternatives > 0)
    bad_request("alternatives are not available with format html: send alternatives=0");
}

void LibreTranslateApi::detect_source(LibreTranslateRequest& r) const {
  if (r.source != "auto") return;
  std::vector<std::string> sources;  // the languages that reach the target
  for (const auto& [code, to] : listing()) {
    if (to.count(r.target)) sources.push_back(code);
  }
  if (sources.size() == 1) {
    r.source = r.detected_language = sources.front();
    r.detected_confidence = 100;
    return;
  }
  std::string all;  // one request, one source language: q's texts read together
  for (const std::string& text : r.q) all += text + "\n";
  const Detection detection = detect_language(all, sources);
  if (!detection.reliable) undetectable(r.q.front());
  r.source = r.detected_language = detection.candidates.front().code;
  r.detected_confidence = detection.candidates.front().confidence;
}

std::string LibreTranslateApi::detect_json(const LibreTranslateRequest& r) const {
  if (r.q.empty()) bad_request(missing("q"));
  std::vector<std::string> served;  // LibreTranslate detects among its languages (/languages)
  for (const auto& [code, to] : listing()) served.push_back(code);
  json out = json::array();
  for (const std::string& text : r.q) {
    const Detection detection = detect_language(text, served);
    if (!detection.reliable) undetectable(text);
    out.push_back(detection_json(detection));
  }
  return (r.batch ? out : out.at(0)).dump();
}

v1::TranslateRequest LibreTranslateApi::to_request(const LibreTranslateRequest& r) const {
  // Which models know each language; a multilingual model's refusal explains an unknown one
  // (an ambiguous alias, say).
  bool source_known = false, target_known = false;
  std::string source_why, target_why;
  const LanguageModel* model = nullptr;
  for (const LanguageModel& m : models_) {
    if (m.languages.multilingual()) continue;
    source_known |= m.languages.source == r.source;
    target_known |= m.languages.target == r.target;
    if (!model && m.languages.source == r.source && m.languages.target == r.target) model = &m;
  }
  for (const LanguageModel& m : models_) {
    if (!m.languages.multilingual()) continue;
    const std::string source = model_code(r.source, m.languages.codes, &source_why);
    const std::string target = model_code(r.target, m.languages.codes, &target_why);
    source_known |= !source.empty();
    target_known |= !target.empty();
    if (!model && !source.empty() && !target.empty()) model = &m;
  }
  auto unsupported = [](const std::string& code, const std::string& why) {
    bad_request(code + " is not supported" + (why.empty() ? "" : " (" + why + ")"));
  };
  if (!source_known && !r.detected_language.empty()) {
    bad_request("source auto: q reads as " + language_name(r.source) + " (" + r.source +
                "), which no model here translates from");
  }
  if (!source_known) unsupported(r.source, source_why);
  if (!target_known) unsupported(r.target, target_why);
  if (!model) {
    bad_request(language_name(r.target) + " (" + r.target +
                ") is not available as a target language from " + language_name(r.source) + " (" +
                r.source + ")");
  }
  v1::TranslateRequest request;
  request.set_model(model->model);
  if (model->languages.multilingual()) {
    request.mutable_options()->set_source_language(r.source);
    request.mutable_options()->set_target_language(r.target);
  }
  for (const std::string& text : r.q) request.add_texts(text);
  if (r.format == "html") request.mutable_options()->set_format("html");
  // LibreTranslate's texts are paragraphs as often as sentences.
  request.mutable_options()->set_split_sentences(true);
  if (r.alternatives > 0) {
    request.mutable_options()->set_num_hypotheses(r.alternatives + 1);
    request.mutable_options()->set_beam_size(std::max(4, r.alternatives + 1));
  }
  return request;
}

std::string LibreTranslateApi::response_json(const LibreTranslateRequest& r,
                                             const v1::TranslateResponse& response) const {
  json texts = json::array(), alternatives = json::array();
  for (const v1::Translation& t : response.translations()) {
    const std::string best = t.hypotheses_size() ? t.hypotheses(0).text() : std::string();
    texts.push_back(best);
    // Alternatives of a one-sentence text: its other hypotheses, without repeats (as
    // LibreTranslate does). A text of several sentences has none.
    json alt = json::array();
    if (t.sentences_size() == 1) {
      std::set<std::string> seen = {best, ""};
      for (const v1::Hypothesis& h : t.sentences(0).hypotheses()) {
        if (seen.insert(h.text()).second) alt.push_back(h.text());
      }
    }
    alternatives.push_back(alt);
  }
  json out = {{"translatedText", r.batch ? texts : texts.at(0)}};
  if (r.alternatives > 0) out["alternatives"] = r.batch ? alternatives : alternatives.at(0);
  if (!r.detected_language.empty()) {
    const json detected = {{"confidence", r.detected_confidence}, {"language", r.detected_language}};
    out["detectedLanguage"] = r.batch ? json(std::vector<json>(texts.size(), detected)) : detected;
  }
  return out.dump();
}

std::map<std::string, std::set<std::string>> LibreTranslateApi::listing() const {
  std::map<std::string, std::set<std::string>> targets;  // every language, with its targets
  for (const LanguageModel& m : models_) {
    if (!m.languages.multilingual()) {
      targets[m.languages.source].insert(m.languages.target);
      targets[m.languages.target];
      continue;
    }
    std::vector<std::string> listed;
    for (const std::string& code : m.languages.codes) listed.push_back(listed_code(code, m.languages.codes));
    for (const std::string& from : listed) {
      for (const std::string& to : listed) {
        if (to != from) targets[from].insert(to);
      }
    }
  }
  return targets;
}

std::string LibreTranslateApi::languages_json() const {
  json out = json::array();
  for (const auto& [code, to] : listing()) {
    // A model's own code (zho_Hans) is named from the language table with its script, an
    // ISO code by ICU.
    const LanguageInfo info = describe_language(code);
    const std::string name = code.size() <= 3 || info.name.empty() ? language_name(code)
                             : info.script.empty()                ? info.name
                                                                  : info.name + " (" + info.script + ")";
    out.push_back({{"code", code}, {"name", name}, {"targets", to}});
  }
  return out.dump();
}

}  // namespace nmt::server
