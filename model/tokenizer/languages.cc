#include "model/tokenizer/languages.h"

#include <algorithm>
#include <cctype>

#include "model/error.h"
#include "model/tokenizer/language_table.h"

namespace nmt {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_alpha(const std::string& s) {
  for (char c : s) {
    if (!std::isalpha(static_cast<unsigned char>(c))) return false;
  }
  return !s.empty();
}

// A name split into its language and script ("deu_Latn", "zh-Hant", "de_DE", "de"); the
// language is ISO 639-3 (from the table for a two-letter code), "" when it is not one.
struct Identity {
  std::string iso639_3;
  std::string script;  // "" when the name has none
};

Identity identity(const std::string& name) {
  const size_t sep = name.find_first_of("_-");
  const std::string language = lower(name.substr(0, sep));
  const std::string rest = sep == std::string::npos ? "" : name.substr(sep + 1);
  Identity id;
  if (!all_alpha(language)) return id;
  if (language.size() == 2) {
    const auto* row = language_table::by_iso639_1(language);
    if (row == nullptr) return id;
    id.iso639_3 = row->iso639_3;
  } else if (language.size() == 3) {
    id.iso639_3 = language;
  } else {
    return id;
  }
  if (rest.size() == 4 && all_alpha(rest)) {  // ISO 15924: Latn, Hans
    id.script = lower(rest);
    id.script[0] = char(std::toupper(static_cast<unsigned char>(id.script[0])));
  } else if (id.iso639_3 == "zho" && rest.size() == 2 && all_alpha(rest)) {
    // Chinese regions name its script (BCP 47's zh-TW is written as zh-Hant).
    const std::string region = lower(rest);
    if (region == "tw" || region == "hk" || region == "mo") id.script = "Hant";
    if (region == "cn" || region == "sg") id.script = "Hans";
  } else if (sep != std::string::npos && !(rest.size() == 2 && all_alpha(rest)) &&
             !(rest.size() == 3 && std::all_of(rest.begin(), rest.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))) {
    return {};  // neither a script nor a region (DE, 419): not a language name
  }
  return id;
}

std::string listed(const std::vector<std::string>& codes, const char* sep) {
  std::string out;
  for (const auto& c : codes) out += (out.empty() ? "" : sep) + c;
  return out;
}

}  // namespace

LanguageInfo describe_language(const std::string& code) {
  const Identity id = identity(code);
  LanguageInfo info;
  info.iso639_3 = id.iso639_3;
  const auto* row = id.iso639_3.empty() ? nullptr : language_table::by_iso639_3(id.iso639_3);
  // A two-letter code names its own row (no -> Norwegian, not Bokmal).
  if (code.size() == 2 || (code.size() > 2 && (code[2] == '_' || code[2] == '-'))) {
    if (const auto* own = language_table::by_iso639_1(lower(code.substr(0, 2)))) row = own;
  }
  info.script = !id.script.empty() ? id.script : row ? row->script : "";
  if (row) {
    info.iso639_1 = row->iso639_1;
    info.name = row->name;
  }
  return info;
}

std::string resolve_language(const std::string& requested, const std::vector<std::string>& codes) {
  for (const auto& c : codes) {
    if (c == requested) return c;
  }
  if (codes.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "language '" + requested + "' was asked of a model without language codes (a bilingual model)");
  }
  // The model's codes never differ only in case, so a case-insensitive match is one code.
  const std::string folded = lower(requested);
  for (const auto& c : codes) {
    if (lower(c) == folded) return c;
  }
  const Identity want = identity(requested);
  std::vector<std::string> matches;
  if (!want.iso639_3.empty()) {
    for (const auto& c : codes) {
      const LanguageInfo have = describe_language(c);
      if (have.iso639_3 != want.iso639_3) continue;
      if (!want.script.empty() && !have.script.empty() && want.script != have.script) continue;
      matches.push_back(c);
    }
  }
  if (matches.size() == 1) return matches.front();
  if (matches.size() > 1) {
    throw Error(ErrorCode::kInvalidArgument, "language '" + requested + "' is ambiguous for this model: it has " +
                                                 listed(matches, " and ") + " (ask for one of them)");
  }
  throw Error(ErrorCode::kInvalidArgument,
              "language '" + requested + "' is not one of this model's languages: " + listed(codes, ", "));
}

}  // namespace nmt
