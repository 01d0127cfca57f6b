#include "server/repository/model_languages.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

namespace nmt::server {
namespace {

bool is_code(const std::string& s) {
  if (s.size() < 2 || s.size() > 3) return false;
  for (char c : s) {
    if (!std::islower(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool is_separator(char c) { return c == '-' || c == '_'; }

}  // namespace

ModelLanguages languages_in_name(const std::string& name) {
  // Words between separators; the last two adjacent language-code words joined by '-'.
  std::vector<std::pair<std::string, char>> words;  // word, separator after it
  std::string word;
  for (char c : name) {
    if (is_separator(c)) {
      words.emplace_back(word, c);
      word.clear();
    } else {
      word += c;
    }
  }
  words.emplace_back(word, '\0');
  // "opus-mt-...": "mt" there names the project, not Maltese.
  const size_t first = words.size() > 2 && words[0].first == "opus" && words[1].first == "mt" ? 2 : 0;
  for (size_t i = words.size(); i-- > first + 1;) {
    if (words[i - 1].second == '-' && is_code(words[i - 1].first) && is_code(words[i].first)) {
      return {words[i - 1].first, words[i].first, {}};
    }
  }
  return {};
}

ModelLanguages multilingual_languages(const Tokenizer& tokenizer, const ModelConfig& config) {
  ModelLanguages out;
  out.codes = tokenizer.languages();
  out.source = tokenizer.default_source_language();
  for (const std::string& code : out.codes) {
    if (config.forced_bos_id >= 0 && tokenizer.language_token(code) == config.forced_bos_id) out.target = code;
  }
  return out;
}

ModelLanguages model_languages(const std::string& model_dir, const std::string& model_name) {
  // A multilingual family's codes are its tokenizer's: read them as the model's load will.
  // One whose files do not load lists no language until they are fixed (its load names the
  // fault); a config.json that does not load says no family: the names below may.
  std::optional<ModelConfig> model_config;
  try {
    model_config = ModelConfig::load(model_dir);
  } catch (const std::exception&) {
  }
  if (model_config && model_config->arch.family != Family::kMarian) {
    try {
      return multilingual_languages(*Tokenizer::load(model_dir, *model_config), *model_config);
    } catch (const std::exception&) {
      return {};
    }
  }
  std::ifstream in(std::filesystem::path(model_dir) / "tokenizer_config.json");
  if (in) {
    const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (config.is_object() && config.value("source_lang", nlohmann::json()).is_string() &&
        config.value("target_lang", nlohmann::json()).is_string()) {
      ModelLanguages pair{config["source_lang"].get<std::string>(),
                          config["target_lang"].get<std::string>(), {}};
      if (is_code(pair.source) && is_code(pair.target)) return pair;
    }
  }
  // The folder's name (a trailing slash leaves an empty last component), then the model's.
  std::filesystem::path dir = std::filesystem::path(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  const ModelLanguages pair = languages_in_name(dir.filename().string());
  return pair.known_pair() ? pair : languages_in_name(model_name);
}

}  // namespace nmt::server
