// MarianTokenizer (docs/models.md): SentencePiece pieces mapped through vocab.json.
#include <sentencepiece_processor.h>

#include <unordered_map>

#include "model/error.h"
#include "model/tokenizer/tokenizer_files.h"
#include "model/tokenizer/tokenizer_schemes.h"

namespace nmt {
namespace {

// piece <-> id of one side.
struct Vocab {
  std::unordered_map<std::string, int> piece_to_id;
  std::vector<std::string> id_to_piece;
  int id(const std::string& piece, int fallback) const {
    auto it = piece_to_id.find(piece);
    return it == piece_to_id.end() ? fallback : it->second;
  }
};

void load_spm(sentencepiece::SentencePieceProcessor* sp, const std::string& path) {
  if (!tokenizer_files::exists(path)) {
    throw Error(ErrorCode::kNotFound, path + ": cannot open SentencePiece model (missing file?)");
  }
  const auto status = sp->Load(path);
  if (!status.ok()) {
    throw Error(ErrorCode::kInvalidArgument, path + ": not a valid SentencePiece model (" +
                                                 std::string(status.ToString()) + ")");
  }
}

// A vocab.json-style object of piece -> id, every id below `size` (`size_field` names the
// config.json field that sets it).
Vocab load_vocab(const std::string& path, int size, const char* size_field) {
  const nlohmann::json vocab = tokenizer_files::read(path, "vocabulary");
  if (!vocab.is_object()) throw Error(ErrorCode::kInvalidArgument, path + ": expected an object of piece -> id");
  Vocab v;
  v.id_to_piece.assign(size_t(size), "");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      throw Error(ErrorCode::kInvalidArgument, path + ": id of piece '" + it.key() + "' is not an integer");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= size) {
      throw Error(ErrorCode::kInvalidArgument,
                  path + ": id " + std::to_string(id) + " of piece '" + it.key() + "' is outside the model's " +
                      size_field + " " + std::to_string(size));
    }
    v.piece_to_id[it.key()] = int(id);
    v.id_to_piece[size_t(id)] = it.key();
  }
  return v;
}

int special(const Vocab& v, const std::string& path, const char* piece) {
  const int id = v.id(piece, -1);
  if (id < 0) throw Error(ErrorCode::kInvalidArgument, path + ": missing special piece '" + std::string(piece) + "'");
  return id;
}

class MarianTokenizer final : public Tokenizer {
 public:
  MarianTokenizer(const std::string& model_dir, const ModelConfig& config, const nlohmann::json& tokenizer_config);
  std::string decode(const std::vector<int>& ids) const override;
  std::vector<int> encode_target(const std::string& text) const override;
  int vocab_size() const override { return int(source_vocab_.id_to_piece.size()); }
  int target_vocab_size() const override { return int(target_vocab_.id_to_piece.size()); }

 private:
  std::vector<int> encode_text(const std::string& text, const std::string& source_language) const override;
  int source_id(const std::string& piece) const;

  sentencepiece::SentencePieceProcessor source_;
  sentencepiece::SentencePieceProcessor target_;
  Vocab source_vocab_;
  Vocab target_vocab_;  // the source vocab's copy when the vocabularies are shared
  int unk_id_ = -1;     // source side
  int source_eos_id_ = -1;
  int eos_id_ = -1;  // target side
  int pad_id_ = -1;
  int target_unk_id_ = -1;
};

MarianTokenizer::MarianTokenizer(const std::string& model_dir, const ModelConfig& config,
                                 const nlohmann::json& tokenizer_config) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  bilingual_source_ = tokenizer_files::string_field(tokenizer_config, "source_lang", "", config_path);
  bilingual_target_ = tokenizer_files::string_field(tokenizer_config, "target_lang", "", config_path);
  load_spm(&source_, model_dir + "/source.spm");
  load_spm(&target_, model_dir + "/target.spm");

  const std::string vocab_path = model_dir + "/vocab.json";
  // tokenizer_config.json's "separate_vocabs" when the file says; else whether the model
  // ships a target_vocab.json.
  const bool separate =
      tokenizer_config.contains("separate_vocabs")
          ? tokenizer_files::bool_field(tokenizer_config, "separate_vocabs", false, config_path)
          : tokenizer_files::exists(model_dir + "/target_vocab.json");
  std::string target_path = vocab_path;
  if (separate) {
    target_path = model_dir + "/target_vocab.json";
    source_vocab_ = load_vocab(vocab_path, config.vocab_size, "vocab_size");
    target_vocab_ = load_vocab(target_path, config.target_vocab_size,
                               config.share_embeddings ? "vocab_size" : "decoder_vocab_size");
  } else {
    if (config.target_vocab_size != config.vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  model_dir + "/config.json: field 'decoder_vocab_size' (" + std::to_string(config.target_vocab_size) +
                      ") differs from 'vocab_size' (" + std::to_string(config.vocab_size) +
                      "), but the model has one vocabulary (no target_vocab.json, tokenizer_config.json "
                      "'separate_vocabs' is not true)");
    }
    source_vocab_ = load_vocab(vocab_path, config.vocab_size, "vocab_size");
    target_vocab_ = source_vocab_;
  }
  unk_id_ = special(source_vocab_, vocab_path, "<unk>");
  source_eos_id_ = special(source_vocab_, vocab_path, "</s>");
  eos_id_ = special(target_vocab_, target_path, "</s>");
  pad_id_ = special(target_vocab_, target_path, "<pad>");
  target_unk_id_ = special(target_vocab_, target_path, "<unk>");
  if (eos_id_ != config.eos_id || pad_id_ != config.pad_id) {
    throw Error(ErrorCode::kInvalidArgument,
                target_path + ": ids of '</s>'/'<pad>' disagree with eos_token_id/pad_token_id of config.json");
  }
}

// MarianTokenizer._convert_token_to_id: vocab.json's id, else the source SentencePiece model's
// own id for the piece (for a piece it does not know either: its <unk>; OPUS-MT's models put
// <unk> at the same id in both), else <unk>.
int MarianTokenizer::source_id(const std::string& piece) const {
  const int id = source_vocab_.id(piece, -1);
  if (id >= 0) return id;
  const int sp = source_.PieceToId(piece);
  return sp >= 0 && sp < int(source_vocab_.id_to_piece.size()) ? sp : unk_id_;
}

std::vector<int> MarianTokenizer::encode_text(const std::string& text, const std::string& source_language) const {
  // A bilingual model has no source-language token: only its own source language is taken.
  if (!source_language.empty() && source_language != bilingual_source_) require_language_token(source_language);
  std::vector<int> ids;
  std::string rest = text;
  // MarianTokenizer.remove_language_code: only at the very start of the text.
  if (rest.rfind(">>", 0) == 0) {
    const size_t end = rest.find("<<");
    if (end != std::string::npos) {
      ids.push_back(source_id(rest.substr(0, end + 2)));
      rest = rest.substr(end + 2);
    }
  }
  std::vector<std::string> pieces;
  source_.Encode(rest, &pieces);
  ids.reserve(ids.size() + pieces.size() + 1);
  for (const auto& p : pieces) ids.push_back(source_id(p));
  ids.push_back(source_eos_id_);
  return ids;
}

// MarianTokenizer in target mode: the target SentencePiece model and the target vocabulary
// (<unk> for a piece it lacks).
std::vector<int> MarianTokenizer::encode_target(const std::string& text) const {
  std::vector<std::string> pieces;
  target_.Encode(text, &pieces);
  std::vector<int> ids;
  ids.reserve(pieces.size());
  for (const auto& p : pieces) ids.push_back(target_vocab_.id(p, target_unk_id_));
  return ids;
}

std::string MarianTokenizer::decode(const std::vector<int>& ids) const {
  const auto& table = target_vocab_.id_to_piece;
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int id : ids) {
    // transformers' decode(skip_special_tokens=True) drops every special token, <unk> too.
    if (id == eos_id_ || id == pad_id_ || id == target_unk_id_) continue;
    if (id < 0 || size_t(id) >= table.size() || table[size_t(id)].empty()) {
      throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    pieces.push_back(table[size_t(id)]);
  }
  std::string text;
  target_.Decode(pieces, &text);
  // As MarianTokenizer.convert_tokens_to_string: SentencePiece passes a piece it does not know
  // through as it is, "\u2581" included; transformers turns those into spaces and strips.
  for (size_t at; (at = text.find("\xE2\x96\x81")) != std::string::npos;) text.replace(at, 3, " ");
  const size_t first = text.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\n\r\f\v") - first + 1);
}

}  // namespace

std::unique_ptr<Tokenizer> load_marian_tokenizer(const std::string& model_dir, const ModelConfig& config,
                                                 const nlohmann::json& tokenizer_config) {
  return std::make_unique<MarianTokenizer>(model_dir, config, tokenizer_config);
}

}  // namespace nmt
