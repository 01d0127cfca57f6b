// The only file that includes sentencepiece_processor.h (see tokenizer.h).
#include "model/tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "model/error.h"

namespace nmt {

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor source;
  sentencepiece::SentencePieceProcessor target;
  std::unordered_map<std::string, int> piece_to_id;
  std::vector<std::string> id_to_piece;
  int unk_id = -1;
  int eos_id = -1;
  int pad_id = -1;
};

namespace {

void load_spm(sentencepiece::SentencePieceProcessor* sp, const std::string& path) {
  std::ifstream probe(path);
  if (!probe) throw Error(ErrorCode::kNotFound, path + ": cannot open SentencePiece model (missing file?)");
  const auto status = sp->Load(path);
  if (!status.ok()) {
    throw Error(ErrorCode::kInvalidArgument, path + ": not a valid SentencePiece model (" +
                                                 std::string(status.ToString()) + ")");
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir, const ModelConfig& config) {
  auto impl = std::make_unique<Impl>();
  load_spm(&impl->source, model_dir + "/source.spm");
  load_spm(&impl->target, model_dir + "/target.spm");

  const std::string vocab_path = model_dir + "/vocab.json";
  std::ifstream in(vocab_path);
  if (!in) throw Error(ErrorCode::kNotFound, vocab_path + ": cannot open vocabulary (missing file?)");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, vocab_path + ": not valid JSON (" + e.what() + ")");
  }
  if (!vocab.is_object()) throw Error(ErrorCode::kInvalidArgument, vocab_path + ": expected an object of piece -> id");
  impl->id_to_piece.assign(size_t(config.vocab_size), "");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      throw Error(ErrorCode::kInvalidArgument, vocab_path + ": id of piece '" + it.key() + "' is not an integer");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= config.vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  vocab_path + ": id " + std::to_string(id) + " of piece '" + it.key() +
                      "' is outside the model's vocab_size " + std::to_string(config.vocab_size));
    }
    impl->piece_to_id[it.key()] = int(id);
    impl->id_to_piece[size_t(id)] = it.key();
  }
  auto special = [&](const char* piece) {
    auto it = impl->piece_to_id.find(piece);
    if (it == impl->piece_to_id.end()) {
      throw Error(ErrorCode::kInvalidArgument, vocab_path + ": missing special piece '" + std::string(piece) + "'");
    }
    return it->second;
  };
  impl->unk_id = special("<unk>");
  impl->eos_id = special("</s>");
  impl->pad_id = special("<pad>");
  if (impl->eos_id != config.eos_id || impl->pad_id != config.pad_id) {
    throw Error(ErrorCode::kInvalidArgument,
                vocab_path + ": ids of '</s>'/'<pad>' disagree with eos_token_id/pad_token_id of config.json");
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<std::string> pieces;
  impl_->source.Encode(text, &pieces);
  std::vector<int> ids;
  ids.reserve(pieces.size() + 1);
  for (const auto& p : pieces) {
    auto it = impl_->piece_to_id.find(p);
    ids.push_back(it == impl_->piece_to_id.end() ? impl_->unk_id : it->second);
  }
  ids.push_back(impl_->eos_id);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int id : ids) {
    if (id == impl_->eos_id || id == impl_->pad_id) continue;
    if (id < 0 || size_t(id) >= impl_->id_to_piece.size() || impl_->id_to_piece[size_t(id)].empty()) {
      throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    pieces.push_back(impl_->id_to_piece[size_t(id)]);
  }
  std::string text;
  impl_->target.Decode(pieces, &text);
  return text;
}

int Tokenizer::vocab_size() const { return int(impl_->id_to_piece.size()); }

}  // namespace nmt
