// The only file that includes sentencepiece_processor.h (see tokenizer.h).
#include "model/tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "model/error.h"

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

}  // namespace

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor source;
  sentencepiece::SentencePieceProcessor target;
  Vocab source_vocab;
  Vocab target_vocab;  // the source vocab's copy when the vocabularies are shared
  int unk_id = -1;     // source side
  int source_eos_id = -1;
  int eos_id = -1;  // target side
  int pad_id = -1;
  int target_unk_id = -1;
};

namespace {

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

void load_spm(sentencepiece::SentencePieceProcessor* sp, const std::string& path) {
  std::ifstream probe(path);
  if (!probe) throw Error(ErrorCode::kNotFound, path + ": cannot open SentencePiece model (missing file?)");
  const auto status = sp->Load(path);
  if (!status.ok()) {
    throw Error(ErrorCode::kInvalidArgument, path + ": not a valid SentencePiece model (" +
                                                 std::string(status.ToString()) + ")");
  }
}

nlohmann::json read_json(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot open " + what + " (missing file?)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, path + ": not valid JSON (" + e.what() + ")");
  }
}

// A vocab.json-style object of piece -> id, every id below `size` (`size_field` names the
// config.json field that sets it).
Vocab load_vocab(const std::string& path, int size, const char* size_field) {
  const nlohmann::json vocab = read_json(path, "vocabulary");
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

// tokenizer_config.json's "separate_vocabs" when the file says; else whether the model
// ships a target_vocab.json.
bool separate_vocabs(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer_config.json";
  if (file_exists(path)) {
    const nlohmann::json j = read_json(path, "tokenizer config");
    if (j.is_object() && j.contains("separate_vocabs")) {
      if (!j["separate_vocabs"].is_boolean()) {
        throw Error(ErrorCode::kInvalidArgument, path + ": field 'separate_vocabs' must be true or false");
      }
      return j["separate_vocabs"].get<bool>();
    }
  }
  return file_exists(model_dir + "/target_vocab.json");
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir, const ModelConfig& config) {
  auto impl = std::make_unique<Impl>();
  load_spm(&impl->source, model_dir + "/source.spm");
  load_spm(&impl->target, model_dir + "/target.spm");

  const std::string vocab_path = model_dir + "/vocab.json";
  const bool separate = separate_vocabs(model_dir);
  std::string target_path = vocab_path;
  if (separate) {
    target_path = model_dir + "/target_vocab.json";
    impl->source_vocab = load_vocab(vocab_path, config.vocab_size, "vocab_size");
    impl->target_vocab = load_vocab(target_path, config.target_vocab_size,
                                    config.share_embeddings ? "vocab_size" : "decoder_vocab_size");
  } else {
    if (config.target_vocab_size != config.vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  model_dir + "/config.json: field 'decoder_vocab_size' (" + std::to_string(config.target_vocab_size) +
                      ") differs from 'vocab_size' (" + std::to_string(config.vocab_size) +
                      "), but the model has one vocabulary (no target_vocab.json, tokenizer_config.json "
                      "'separate_vocabs' is not true)");
    }
    impl->source_vocab = load_vocab(vocab_path, config.vocab_size, "vocab_size");
    impl->target_vocab = impl->source_vocab;
  }
  impl->unk_id = special(impl->source_vocab, vocab_path, "<unk>");
  impl->source_eos_id = special(impl->source_vocab, vocab_path, "</s>");
  impl->eos_id = special(impl->target_vocab, target_path, "</s>");
  impl->pad_id = special(impl->target_vocab, target_path, "<pad>");
  impl->target_unk_id = special(impl->target_vocab, target_path, "<unk>");
  if (impl->eos_id != config.eos_id || impl->pad_id != config.pad_id) {
    throw Error(ErrorCode::kInvalidArgument,
                target_path + ": ids of '</s>'/'<pad>' disagree with eos_token_id/pad_token_id of config.json");
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

// MarianTokenizer._convert_token_to_id: vocab.json's id, else the source SentencePiece model's
// own id for the piece (for a piece it does not know either: its <unk>; OPUS-MT's models put
// <unk> at the same id in both), else <unk>.
int Tokenizer::source_id(const std::string& piece) const {
  const int id = impl_->source_vocab.id(piece, -1);
  if (id >= 0) return id;
  const int sp = impl_->source.PieceToId(piece);
  return sp >= 0 && sp < int(impl_->source_vocab.id_to_piece.size()) ? sp : impl_->unk_id;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
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
  impl_->source.Encode(rest, &pieces);
  ids.reserve(ids.size() + pieces.size() + 1);
  for (const auto& p : pieces) ids.push_back(source_id(p));
  ids.push_back(impl_->source_eos_id);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  const auto& table = impl_->target_vocab.id_to_piece;
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int id : ids) {
    // transformers' decode(skip_special_tokens=True) drops every special token, <unk> too.
    if (id == impl_->eos_id || id == impl_->pad_id || id == impl_->target_unk_id) continue;
    if (id < 0 || size_t(id) >= table.size() || table[size_t(id)].empty()) {
      throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    pieces.push_back(table[size_t(id)]);
  }
  std::string text;
  impl_->target.Decode(pieces, &text);
  // As MarianTokenizer.convert_tokens_to_string: SentencePiece passes a piece it does not know
  // through as it is, "\u2581" included; transformers turns those into spaces and strips.
  for (size_t at; (at = text.find("\xE2\x96\x81")) != std::string::npos;) text.replace(at, 3, " ");
  const size_t first = text.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\n\r\f\v") - first + 1);
}

int Tokenizer::vocab_size() const { return int(impl_->source_vocab.id_to_piece.size()); }
int Tokenizer::target_vocab_size() const { return int(impl_->target_vocab.id_to_piece.size()); }

}  // namespace nmt
