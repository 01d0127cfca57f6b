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
  // Reads source.spm, target.spm and vocab.json from model_dir, and target_vocab.json when
  // the model has separate vocabularies (tokenizer_config.json "separate_vocabs", or the file
  // present); throws nmt::Error.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir, const ModelConfig& config);
  ~Tokenizer();

  // Source text -> ids, with </s> appended; pieces map as source_id() says. As MarianTokenizer,
  // a leading language code such as ">>fra<<" (text starting ">>", up to the first "<<") is
  // split off before SentencePiece and looked up as one token.
  std::vector<int> encode(const std::string& text) const;
  // Target ids -> text; </s>, <pad> and <unk> are dropped (as transformers' decode with
  // skip_special_tokens=True).
  std::string decode(const std::vector<int>& ids) const;
  int vocab_size() const;         // the source vocabulary that encode() maps into
  int target_vocab_size() const;  // the target vocabulary that decode() reads

 private:
  int source_id(const std::string& piece) const;
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nmt
