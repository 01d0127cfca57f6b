#include "server/repository/model_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace nmt::server {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::vector<std::string> model_files(const std::string& folder) {
  std::string cls;
  if (std::ifstream in{fs::path(folder) / "tokenizer_config.json"}) {
    const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (config.is_object() && config.value("tokenizer_class", nlohmann::json()).is_string()) {
      cls = config["tokenizer_class"].get<std::string>();
    }
  }
  // transformers 4's fast twins are the same scheme (as Tokenizer::load reads them).
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  if (cls == "NllbTokenizer" || cls == "MBart50Tokenizer") {
    return {"config.json", "model.safetensors", "sentencepiece.bpe.model", "tokenizer_config.json"};
  }
  if (cls == "M2M100Tokenizer") {
    return {"config.json", "model.safetensors", "sentencepiece.bpe.model", "tokenizer_config.json",
            "vocab.json"};
  }
  return {"config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json"};
}

const std::vector<std::string>& optional_model_files() {
  static const std::vector<std::string> files = {"generation_config.json", "tokenizer_config.json",
                                                 "tokenizer.json", "special_tokens_map.json",
                                                 "target_vocab.json", "glossary.tsv"};
  return files;
}

std::string model_fingerprint(const std::string& folder, std::string* missing) {
  std::ostringstream print, absent;
  const std::vector<std::string> required = model_files(folder);
  for (const std::string& file : optional_model_files()) {
    if (std::find(required.begin(), required.end(), file) != required.end()) continue;
    std::error_code ec;
    const fs::path path = fs::path(folder) / file;
    const auto size = fs::file_size(path, ec);
    const auto mtime = ec ? fs::file_time_type() : fs::last_write_time(path, ec);
    if (ec) print << file << ":-;";  // absent: adding it changes the print
    else print << file << ':' << size << ':' << mtime.time_since_epoch().count() << ';';
  }
  for (const std::string& file : required) {
    std::error_code ec;
    const fs::path path = fs::path(folder) / file;
    // Follows symbolic links: a repository of links to shared weights fingerprints the
    // weights, not the links.
    const auto size = fs::file_size(path, ec);
    const auto mtime = ec ? fs::file_time_type() : fs::last_write_time(path, ec);
    if (ec) {
      absent << (absent.tellp() > 0 ? ", " : "") << file;
      continue;
    }
    print << file << ':' << size << ':' << mtime.time_since_epoch().count() << ';';
  }
  if (missing) *missing = absent.str();
  return absent.tellp() > 0 ? "" : print.str();
}

std::map<std::string, ModelFolder> scan_model_folders(const std::string& repository) {
  std::error_code ec;
  fs::directory_iterator it(repository, ec);
  if (ec) throw std::runtime_error("cannot read model_repository.path " + repository + ": " + ec.message());
  std::map<std::string, ModelFolder> out;
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_directory(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // hidden: e.g. a copy being written
    if (!fs::exists(entry.path() / "config.json", ec)) continue;
    ModelFolder folder;
    folder.path = entry.path().string();
    folder.fingerprint = model_fingerprint(folder.path, &folder.missing);
    // Read here, outside the registry's lock: a multilingual model's tokenizer files load.
    folder.languages = model_languages(folder.path, name);
    out.emplace(name, std::move(folder));
  }
  return out;
}

}  // namespace nmt::server
