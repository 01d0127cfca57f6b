#pragma once
// The folders of a model repository (config model_repository.path): which subfolders hold
// an OPUS-MT-layout model, a fingerprint that changes when any of its files is replaced,
// and the language pair its name tells.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nmt::server {

// The files a Translator loads from a model folder.
const std::vector<std::string>& model_files();

struct ModelFolder {
  std::string path;
  // Size and modification time (ns) of each model file, in model_files() order; a replaced
  // or rewritten file changes it. Empty when the folder is not complete.
  std::string fingerprint;
  std::string missing;  // the model files absent from the folder, "" when complete
};

// Every subfolder of `repository` that holds a config.json (a model, complete or not), by
// folder name. A subfolder without one is not a model and is skipped. Throws
// std::runtime_error when the repository cannot be read.
std::map<std::string, ModelFolder> scan_model_folders(const std::string& repository);

// The folder's fingerprint now ("" when a model file is missing).
std::string model_fingerprint(const std::string& folder, std::string* missing = nullptr);

}  // namespace nmt::server
