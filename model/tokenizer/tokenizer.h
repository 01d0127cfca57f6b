#pragma once
// Text <-> token ids, one implementation per vocabulary scheme (docs/models.md): Marian's
// (model/tokenizer/tokenizer_marian.cc) and the fairseq dictionary of NLLB-200, M2M-100 and mBART-50
// (model/tokenizer/tokenizer_fairseq.cc). sentencepiece_processor.h stays inside those .cc files: its
// absl::string_view clashes with gRPC's Abseil.
#include <memory>
#include <string>
#include <vector>

#include "model/config/model_config.h"

namespace nmt {

class Tokenizer {
 public:
  // Reads the scheme's files from model_dir (Marian: source.spm, target.spm, vocab.json and
  // target_vocab.json when the vocabularies are separate; NLLB / mBART-50:
  // sentencepiece.bpe.model + tokenizer_config.json, with tokenizer.json /
  // special_tokens_map.json for the language codes; M2M-100: vocab.json +
  // sentencepiece.bpe.model + tokenizer_config.json). The scheme is tokenizer_config.json's
  // tokenizer_class (a folder without one and with source.spm is Marian's). Throws nmt::Error
  // naming the file at fault.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir, const ModelConfig& config);
  virtual ~Tokenizer() = default;

  // Source text -> ids as transformers' tokenizer(text) with src_lang = source_language, a
  // code of languages() ("" = default_source_language(); a bilingual model takes only "").
  // Throws nmt::Error(kInvalidArgument) for a code the model lacks.
  std::vector<int> encode(const std::string& text, const std::string& source_language = "") const {
    return encode_text(text, source_language);
  }
  // Target ids -> text, as transformers' decode(ids, skip_special_tokens=True): the specials
  // and language codes are dropped. Throws nmt::Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
  // Target text -> target ids of its pieces, as transformers' tokenizer(text_target=text)
  // without its specials (no language code, no </s>): a target_prefix, a Score target.
  virtual std::vector<int> encode_target(const std::string& text) const = 0;
  virtual int vocab_size() const = 0;         // the source vocabulary that encode() maps into
  virtual int target_vocab_size() const = 0;  // the target vocabulary that decode() reads

  // The model's language codes as it spells them ("deu_Latn", "de", "de_DE"), in id order;
  // empty for a bilingual model.
  const std::vector<std::string>& languages() const { return languages_; }
  int language_token(const std::string& code) const;  // id of a code of languages(), else -1
  // tokenizer_config.json's src_lang / tgt_lang where a multilingual model names them
  // (src_lang falls back to transformers' default for the scheme when the model has it);
  // "" otherwise.
  const std::string& default_source_language() const { return default_source_; }
  const std::string& default_target_language() const { return default_target_; }
  // A bilingual model's pair as tokenizer_config.json names it (source_lang, target_lang);
  // "" where it does not.
  const std::string& bilingual_source() const { return bilingual_source_; }
  const std::string& bilingual_target() const { return bilingual_target_; }

 protected:
  Tokenizer() = default;
  virtual std::vector<int> encode_text(const std::string& text, const std::string& source_language) const = 0;
  // Throws nmt::Error(kInvalidArgument) naming `code` and listing languages().
  int require_language_token(const std::string& code) const;

  std::vector<std::string> languages_;
  std::vector<int> language_ids_;  // parallel to languages_
  std::string default_source_, default_target_;
  std::string bilingual_source_, bilingual_target_;
};

}  // namespace nmt
