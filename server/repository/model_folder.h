#pragma once
// The folders of a model repository (config model_repository.path): which subfolders hold
// a model (Marian's OPUS-MT layout, or NLLB-200 / M2M-100 / mBART-50 as transformers saves
// them), a fingerprint that changes when any of its files is replaced, and its languages.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/repository/model_languages.h"

namespace nmt::server {

// The files a Translator must find in `folder`: config.json, model.safetensors and the
// tokenizer's files of the scheme its tokenizer_config.json's tokenizer_class names
// (NllbTokenizer, MBart50Tokenizer: sentencepiece.bpe.model, tokenizer_config.json;
// M2M100Tokenizer: those and vocab.json; otherwise Marian's source.spm, target.spm,
// vocab.json).
std::vector<std::string> model_files(const std::string& folder);
// Files a Translator reads where they exist (generation_config.json, the tokenizer's other
// files) and the model's glossary (glossary.tsv, ServedModel::glossary): fingerprinted too,
// so that adding, replacing or removing one reloads the model (on SIGHUP's rescan).
const std::vector<std::string>& optional_model_files();

struct ModelFolder {
  std::string path;
  // Size and modification time (ns) of each model file (model_files() and the
  // optional_model_files() present or not); a replaced, rewritten, added or removed file
  // changes it. Empty when the folder is not complete.
  std::string fingerprint;
  std::string missing;  // the model files absent from the folder, "" when complete
  ModelLanguages languages;  // model_languages() of the folder
};

// Every subfolder of `repository` that holds a config.json (a model, complete or not), by
// folder name. A subfolder without one is not a model and is skipped. Throws
// std::runtime_error when the repository cannot be read.
std::map<std::string, ModelFolder> scan_model_folders(const std::string& repository);

// The folder's fingerprint now ("" when a model file is missing).
std::string model_fingerprint(const std::string& folder, std::string* missing = nullptr);

}  // namespace nmt::server
