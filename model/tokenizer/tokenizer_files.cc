#include "model/tokenizer/tokenizer_files.h"

#include <fstream>

#include "model/error.h"

namespace nmt::tokenizer_files {

bool exists(const std::string& path) { return std::ifstream(path).good(); }

void require(const std::string& model_dir, const char* name, const std::string& what) {
  if (!exists(model_dir + "/" + name)) {
    throw Error(ErrorCode::kNotFound, model_dir + ": missing file '" + name + "' (" + what + ")");
  }
}

nlohmann::json read(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot open " + what + " (missing file?)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, path + ": not valid JSON (" + e.what() + ")");
  }
}

nlohmann::json read_optional_object(const std::string& path, const char* what) {
  if (!exists(path)) return nlohmann::json::object();
  nlohmann::json j = read(path, what);
  if (!j.is_object()) throw Error(ErrorCode::kInvalidArgument, path + ": expected a JSON object");
  return j;
}

std::string token_content(const nlohmann::json& token) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return "";
}

std::string string_field(const nlohmann::json& object, const char* key, const std::string& fallback,
                         const std::string& path) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  const std::string s = token_content(object[key]);
  if (s.empty()) throw Error(ErrorCode::kInvalidArgument, path + ": field '" + key + "' must be a non-empty string");
  return s;
}

bool bool_field(const nlohmann::json& object, const char* key, bool fallback, const std::string& path) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_boolean()) throw Error(ErrorCode::kInvalidArgument, path + ": field '" + key + "' must be true or false");
  return object[key].get<bool>();
}

}  // namespace nmt::tokenizer_files
