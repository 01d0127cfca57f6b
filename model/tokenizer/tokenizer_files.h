#pragma once
// Reading the Hugging Face tokenizer files of a model folder (tokenizer_config.json,
// special_tokens_map.json, tokenizer.json, vocab.json): what every tokenizer scheme shares.
// Every error names the file.
#include <string>

#include <nlohmann/json.hpp>

namespace nmt::tokenizer_files {

bool exists(const std::string& path);
// Throws kNotFound unless model_dir holds `name`: "<model_dir>: missing file '<name>' (<what>)".
void require(const std::string& model_dir, const char* name, const std::string& what);
// The file's JSON; kNotFound when it is missing, kInvalidArgument when it does not parse.
// `what` says what the file is for ("vocabulary").
nlohmann::json read(const std::string& path, const char* what);
// The file's JSON object, or an empty object when the file is missing.
nlohmann::json read_optional_object(const std::string& path, const char* what);

// `object[key]` as a string, or `fallback` when it is absent or null. A token may be written as
// a string or as an AddedToken object ({"content": ...}). Throws naming `path` and `key` for
// another type.
std::string string_field(const nlohmann::json& object, const char* key, const std::string& fallback,
                         const std::string& path);
bool bool_field(const nlohmann::json& object, const char* key, bool fallback, const std::string& path);
// The text of a token written as a string or as {"content": ...}; "" when it is neither.
std::string token_content(const nlohmann::json& token);

}  // namespace nmt::tokenizer_files
