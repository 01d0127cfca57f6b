#pragma once
// SentencePiece pieces mapped through vocab.json (DESIGN.md §3). sentencepiece_processor.h
// stays inside tokenizer.cc: its absl::string_view clashes with gRPC's Abseil.
#include <memory>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace nmt {

class Tokenizer {
 public:
  // Reads source.spm, target.spm and vocab.json from model_dir; throws nmt::Error.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir, const ModelConfig& config);
  ~Tokenizer();

  // Source text -> ids, with </s> appended. Unknown pieces map to <unk>.
  std::vector<int> encode(const std::string& text) const;
  // Target ids -> text; </s> and <pad> are dropped.
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nmt
