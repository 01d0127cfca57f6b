// The fairseq-dictionary tokenizers of NLLB-200, M2M-100 and mBART-50, id for id as
// transformers' NllbTokenizer, M2M100Tokenizer and MBart50Tokenizer load a folder that
// save_pretrained wrote:
// - ids: <s> 0, <pad> 1, </s> 2, <unk> 3, then the SentencePiece pieces (NLLB / mBART-50: the
//   spm id + 1, tokenizer.json's vocabulary where the folder has one; M2M-100: vocab.json),
//   then the language codes, then <mask> (NLLB / mBART-50). The codes and their ids are read
//   from the folder (tokenizer.json added_tokens, tokenizer_config.json added_tokens_decoder /
//   extra_special_tokens / additional_special_tokens, special_tokens_map.json), so a model with
//   its own code list works.
// - source: [src_lang] X </s>; NLLB with legacy_behaviour: X </s> [src_lang].
// - decode(skip_special_tokens=True): specials, codes and <mask> dropped, pieces joined as
//   SentencePiece / the Metaspace decoder do.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "model/error.h"
#include "model/tokenizer_files.h"
#include "model/tokenizer_schemes.h"

namespace nmt {
namespace {

namespace files = tokenizer_files;

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary

const char* scheme_class(FairseqScheme s) {
  switch (s) {
    case FairseqScheme::kNllb: return "NllbTokenizer";
    case FairseqScheme::kM2M100: return "M2M100Tokenizer";
    case FairseqScheme::kMBart50: return "MBart50Tokenizer";
  }
  return "?";
}

// transformers' src_lang when tokenizer_config.json has none (each class's __init__ default).
const char* default_src_lang(FairseqScheme s) {
  switch (s) {
    case FairseqScheme::kNllb: return "eng_Latn";
    case FairseqScheme::kM2M100: return "en";
    case FairseqScheme::kMBart50: return "en_XX";
  }
  return "";
}

// M2M-100 spells a code "de" and its token "__de__".
bool is_m2m_token(const std::string& t) {
  return t.size() > 4 && t.compare(0, 2, "__") == 0 && t.compare(t.size() - 2, 2, "__") == 0;
}

void replace_all(std::string* s, const std::string& from, const std::string& to) {
  for (size_t at = 0; (at = s->find(from, at)) != std::string::npos; at += to.size()) s->replace(at, from.size(), to);
}

// transformers' clean_up_tokenization (tokenization_utils_base.py): the spaces English
// detokenization leaves before punctuation and contractions.
std::string clean_up_tokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_all(&s, from, to);
  return s;
}

class FairseqTokenizer final : public Tokenizer {
 public:
  FairseqTokenizer(const std::string& model_dir, const ModelConfig& config, FairseqScheme scheme,
                   const nlohmann::json& tokenizer_config);
  std::string decode(const std::vector<int>& ids) const override;
  int vocab_size() const override { return int(id_to_piece_.size()); }
  int target_vocab_size() const override { return int(id_to_piece_.size()); }

 private:
  std::vector<int> encode_text(const std::string& text, const std::string& source_language) const override;
  int piece_id(const std::string& piece) const;
  // SentencePiece's pieces of `text` as ids, appended to `ids`.
  void encode_pieces(const std::string& text, std::vector<int>* ids) const;
  // Throws unless id is one of the model's (config.json vocab_size); `source` names the file
  // that gave it.
  void check_id(const std::string& token, int64_t id, const std::string& source) const;
  // Records `id` as `token`; decode drops it when `special`.
  void set_token(const std::string& token, int64_t id, bool special, const std::string& source);
  void load_base_vocabulary(const std::string& model_dir, const nlohmann::json& tokenizer_json, bool has_tokenizer_json);
  void load_languages(const std::string& model_dir, const nlohmann::json& tokenizer_config,
                      const nlohmann::json& tokenizer_json);

  FairseqScheme scheme_;
  sentencepiece::SentencePieceProcessor sp_;
  std::string sp_path_;
  // Pieces of the vocabulary file (tokenizer.json / vocab.json); empty when the ids are
  // SentencePiece's + 1 (a folder without tokenizer.json).
  std::unordered_map<std::string, int> piece_to_id_;
  bool spm_offset_ids_ = false;
  std::vector<std::string> id_to_piece_;  // "" where an id has no piece
  std::vector<char> special_;             // per id: decode drops it
  struct Added {
    int id;
    bool special;
  };
  std::unordered_map<std::string, Added> added_;  // added tokens (specials, codes, <mask>)
  std::string added_source_;                    // the file added_ came from
  // The added tokens by first byte, longest first: text that spells one is that token (as
  // transformers splits the text on its added tokens before SentencePiece sees it).
  std::vector<std::vector<std::pair<std::string, int>>> added_by_byte_;
  int unk_id_ = -1, eos_id_ = -1;
  // config.json's vocab_size: every id of the tokenizer must be below it. It may be larger
  // than the tokenizer: NLLB-200's is 256206 for 256204 tokens, M2M-100 has 8 "madeup words".
  int model_vocab_ = 0;
  bool legacy_ = false;
  bool clean_up_spaces_ = false;
  // NLLB / mBART-50 decode through the tokenizers library's Metaspace decoder (one leading
  // space of the first piece dropped); M2M-100 through SentencePiece, then strip().
  bool metaspace_decode_ = true;
};

void FairseqTokenizer::check_id(const std::string& token, int64_t id, const std::string& source) const {
  if (id < 0 || id >= model_vocab_) {
    throw Error(ErrorCode::kInvalidArgument,
                source + ": id " + std::to_string(id) + " of '" + token + "' is outside config.json's vocab_size " +
                    std::to_string(model_vocab_));
  }
}

void FairseqTokenizer::set_token(const std::string& token, int64_t id, bool special, const std::string& source) {
  check_id(token, id, source);
  if (size_t(id) >= id_to_piece_.size()) {
    id_to_piece_.resize(size_t(id) + 1);
    special_.resize(size_t(id) + 1, 0);
  }
  id_to_piece_[size_t(id)] = token;
  special_[size_t(id)] = special;
}

FairseqTokenizer::FairseqTokenizer(const std::string& model_dir, const ModelConfig& config, FairseqScheme scheme,
                                   const nlohmann::json& tokenizer_config)
    : scheme_(scheme), model_vocab_(std::min(config.vocab_size, config.target_vocab_size)) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (tokenizer_config.empty()) {
    throw Error(ErrorCode::kNotFound, config_path + ": missing (" + scheme_class(scheme) + " reads src_lang and its codes there)");
  }
  sp_path_ = model_dir + "/sentencepiece.bpe.model";
  if (!files::exists(sp_path_)) {
    throw Error(ErrorCode::kNotFound, sp_path_ + ": cannot open SentencePiece model (missing file?)");
  }
  const auto status = sp_.Load(sp_path_);
  if (!status.ok()) {
    throw Error(ErrorCode::kInvalidArgument,
                sp_path_ + ": not a valid SentencePiece model (" + std::string(status.ToString()) + ")");
  }
  metaspace_decode_ = scheme != FairseqScheme::kM2M100;
  legacy_ = scheme == FairseqScheme::kNllb && files::bool_field(tokenizer_config, "legacy_behaviour", false, config_path);
  clean_up_spaces_ = files::bool_field(tokenizer_config, "clean_up_tokenization_spaces", false, config_path);

  const std::string json_path = model_dir + "/tokenizer.json";
  const bool has_tokenizer_json = scheme != FairseqScheme::kM2M100 && files::exists(json_path);
  const nlohmann::json tokenizer_json =
      has_tokenizer_json ? files::read_optional_object(json_path, "tokenizer") : nlohmann::json::object();
  load_base_vocabulary(model_dir, tokenizer_json, has_tokenizer_json);

  // The added tokens with their ids: tokenizer.json's list (what the tokenizers library
  // loads), else tokenizer_config.json's added_tokens_decoder.
  if (tokenizer_json.contains("added_tokens")) {
    added_source_ = json_path;
    for (const auto& t : tokenizer_json["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || files::token_content(t).empty()) {
        throw Error(ErrorCode::kInvalidArgument, json_path + ": an entry of 'added_tokens' lacks 'id' or 'content'");
      }
      check_id(files::token_content(t), t["id"].get<int64_t>(), json_path);
      added_[files::token_content(t)] = {t["id"].get<int>(), files::bool_field(t, "special", true, json_path)};
    }
  } else if (tokenizer_config.contains("added_tokens_decoder") && tokenizer_config["added_tokens_decoder"].is_object()) {
    added_source_ = config_path;
    for (auto it = tokenizer_config["added_tokens_decoder"].begin(); it != tokenizer_config["added_tokens_decoder"].end(); ++it) {
      int id = -1;
      try {
        id = std::stoi(it.key());
      } catch (const std::exception&) {
      }
      if (id < 0 || files::token_content(it.value()).empty()) {
        throw Error(ErrorCode::kInvalidArgument, config_path + ": entry '" + it.key() + "' of 'added_tokens_decoder' is not an id with a 'content'");
      }
      check_id(files::token_content(it.value()), id, config_path);
      added_[files::token_content(it.value())] = {id, files::bool_field(it.value(), "special", true, config_path)};
    }
  }

  // The four specials: their own names (tokenizer_config.json may rename them), ids from the
  // added tokens, else the vocabulary, else fairseq's 0-3.
  const struct { const char* field; const char* name; int fairseq_id; } kSpecials[] = {
      {"bos_token", "<s>", 0}, {"pad_token", "<pad>", 1}, {"eos_token", "</s>", 2}, {"unk_token", "<unk>", 3}};
  int ids[4];
  for (int i = 0; i < 4; ++i) {
    const std::string token = files::string_field(tokenizer_config, kSpecials[i].field, kSpecials[i].name, config_path);
    const std::string vocab_path = scheme == FairseqScheme::kM2M100 ? model_dir + "/vocab.json" : json_path;
    int id = -1;
    std::string source = vocab_path;
    if (auto a = added_.find(token); a != added_.end()) {
      id = a->second.id;
      source = added_source_;
    } else if (auto p = piece_to_id_.find(token); p != piece_to_id_.end()) {
      id = p->second;
    } else if (spm_offset_ids_) {
      id = kSpecials[i].fairseq_id;
      source = sp_path_;
    }
    if (id < 0) throw Error(ErrorCode::kInvalidArgument, vocab_path + ": no id for the special token '" + token + "'");
    set_token(token, id, true, source);
    ids[i] = id;
  }
  unk_id_ = ids[3];
  eos_id_ = ids[2];
  if (eos_id_ != config.eos_id || ids[1] != config.pad_id) {
    throw Error(ErrorCode::kInvalidArgument,
                model_dir + "/config.json: eos_token_id " + std::to_string(config.eos_id) + " / pad_token_id " +
                    std::to_string(config.pad_id) + " disagree with the tokenizer's '</s>' " + std::to_string(eos_id_) +
                    " / '<pad>' " + std::to_string(ids[1]));
  }

  load_languages(model_dir, tokenizer_config, tokenizer_json);

  if (scheme != FairseqScheme::kM2M100) {
    const std::string mask = files::string_field(tokenizer_config, "mask_token", "<mask>", config_path);
    if (added_.count(mask) == 0 && spm_offset_ids_) {  // fairseq: right after the codes
      set_token(mask, sp_.GetPieceSize() + 1 + int(languages_.size()), true, sp_path_);
    }
  }
  // The added tokens: those these classes add (specials, codes, <mask>) are special, so that
  // decode(skip_special_tokens=True) drops them.
  for (const auto& [token, a] : added_) set_token(token, a.id, a.special, added_source_);
  added_by_byte_.resize(256);
  for (size_t id = 0; id < id_to_piece_.size(); ++id) {
    const std::string& t = id_to_piece_[id];
    const auto a = added_.find(t);
    if (!t.empty() && (special_[id] || (a != added_.end() && a->second.id == int(id)))) {
      added_by_byte_[static_cast<unsigned char>(t[0])].emplace_back(t, int(id));
    }
  }
  for (auto& list : added_by_byte_) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }

  const std::string src = files::string_field(tokenizer_config, "src_lang", "", config_path);
  if (!src.empty() && language_token(src) < 0) {
    throw Error(ErrorCode::kInvalidArgument, config_path + ": src_lang '" + src + "' is not one of the model's language codes");
  }
  default_source_ = !src.empty() ? src : language_token(default_src_lang(scheme)) >= 0 ? default_src_lang(scheme) : "";
  default_target_ = files::string_field(tokenizer_config, "tgt_lang", "", config_path);
  if (!default_target_.empty() && language_token(default_target_) < 0) {
    throw Error(ErrorCode::kInvalidArgument, config_path + ": tgt_lang '" + default_target_ + "' is not one of the model's language codes");
  }
}

void FairseqTokenizer::load_base_vocabulary(const std::string& model_dir, const nlohmann::json& tokenizer_json,
                                            bool has_tokenizer_json) {
  auto set_piece = [&](const std::string& piece, int64_t id, const std::string& path) {
    set_token(piece, id, false, path);
    piece_to_id_[piece] = int(id);
  };
  if (scheme_ == FairseqScheme::kM2M100) {
    const std::string path = model_dir + "/vocab.json";
    const nlohmann::json vocab = files::read(path, "vocabulary");
    if (!vocab.is_object()) throw Error(ErrorCode::kInvalidArgument, path + ": expected an object of piece -> id");
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer()) {
        throw Error(ErrorCode::kInvalidArgument, path + ": id of piece '" + it.key() + "' is not an integer");
      }
      set_piece(it.key(), it.value().get<int64_t>(), path);
    }
  } else if (has_tokenizer_json) {
    const std::string path = model_dir + "/tokenizer.json";
    const nlohmann::json& model = tokenizer_json.contains("model") ? tokenizer_json["model"] : nlohmann::json();
    const nlohmann::json& vocab = model.is_object() && model.contains("vocab") ? model["vocab"] : nlohmann::json();
    if (vocab.is_object()) {  // BPE / WordPiece: piece -> id
      for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer()) {
          throw Error(ErrorCode::kInvalidArgument, path + ": id of piece '" + it.key() + "' is not an integer");
        }
        set_piece(it.key(), it.value().get<int64_t>(), path);
      }
    } else if (vocab.is_array()) {  // Unigram: [piece, score] in id order
      for (size_t i = 0; i < vocab.size(); ++i) {
        if (!vocab[i].is_array() || vocab[i].empty() || !vocab[i][0].is_string()) {
          throw Error(ErrorCode::kInvalidArgument, path + ": entry " + std::to_string(i) + " of model.vocab is not [piece, score]");
        }
        set_piece(vocab[i][0].get<std::string>(), int64_t(i), path);
      }
    } else {
      throw Error(ErrorCode::kInvalidArgument, path + ": no model.vocab");
    }
  } else {
    // fairseq's alignment (as the classes' SentencePiece path computes it): spm ids 0-2 (<unk>,
    // <s>, </s>) give way to the four specials, every other piece is its spm id + 1.
    spm_offset_ids_ = true;
    const int n = sp_.GetPieceSize();
    for (int i = 0; i < n; ++i) {
      if (!sp_.IsControl(i) && !sp_.IsUnknown(i)) set_token(sp_.IdToPiece(i), int64_t(i) + 1, false, sp_path_);
    }
  }
}

void FairseqTokenizer::load_languages(const std::string& model_dir, const nlohmann::json& tokenizer_config,
                                      const nlohmann::json& tokenizer_json) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const std::string map_path = model_dir + "/special_tokens_map.json";
  const nlohmann::json special_map = files::read_optional_object(map_path, "special tokens map");
  // The code list: transformers 5 writes extra_special_tokens, transformers 4
  // additional_special_tokens (also in special_tokens_map.json).
  std::vector<std::string> tokens;
  std::string list_source;
  const std::pair<const nlohmann::json*, std::pair<const char*, const std::string*>> kLists[] = {
      {&tokenizer_config, {"extra_special_tokens", &config_path}},
      {&tokenizer_config, {"additional_special_tokens", &config_path}},
      {&special_map, {"extra_special_tokens", &map_path}},
      {&special_map, {"additional_special_tokens", &map_path}}};
  for (const auto& [object, where] : kLists) {
    if (!object->contains(where.first) || !(*object)[where.first].is_array() || (*object)[where.first].empty()) continue;
    for (const auto& t : (*object)[where.first]) {
      const std::string s = files::token_content(t);
      if (s.empty()) {
        throw Error(ErrorCode::kInvalidArgument, *where.second + ": an entry of '" + where.first + "' is not a token");
      }
      tokens.push_back(s);
    }
    list_source = *where.second + " '" + where.first + "'";
    break;
  }
  // Else the special added tokens that are not the named ones (a tokenizer.json alone).
  if (tokens.empty() && tokenizer_json.contains("added_tokens")) {
    std::unordered_set<std::string> named;
    for (const auto& [field, name] : {std::pair<const char*, const char*>{"bos_token", "<s>"}, {"pad_token", "<pad>"},
                                      {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"mask_token", "<mask>"}}) {
      named.insert(files::string_field(tokenizer_config, field, name, config_path));
    }
    std::vector<std::pair<int, std::string>> by_id;
    for (const auto& [token, a] : added_) {
      if (a.special && named.count(token) == 0) by_id.emplace_back(a.id, token);
    }
    std::sort(by_id.begin(), by_id.end());
    for (const auto& entry : by_id) tokens.push_back(entry.second);
    list_source = model_dir + "/tokenizer.json 'added_tokens'";
  }
  if (scheme_ == FairseqScheme::kM2M100) {
    tokens.erase(std::remove_if(tokens.begin(), tokens.end(), [](const std::string& t) { return !is_m2m_token(t); }),
                 tokens.end());
  }
  if (tokens.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                config_path + ": no language codes (no 'extra_special_tokens' / 'additional_special_tokens' here or in "
                              "special_tokens_map.json, no added tokens in tokenizer.json)");
  }
  const int first_code_id = scheme_ == FairseqScheme::kM2M100 ? int(piece_to_id_.size()) : sp_.GetPieceSize() + 1;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    if (!seen.insert(token).second) throw Error(ErrorCode::kInvalidArgument, list_source + ": code '" + token + "' listed twice");
    int id = -1;
    std::string source = added_source_;
    if (auto a = added_.find(token); a != added_.end()) {
      id = a->second.id;
    } else if (added_.empty()) {
      // No file gives the codes' ids: the classes number them after the pieces, in list order.
      id = first_code_id + int(i);
      source = list_source;
    } else {
      throw Error(ErrorCode::kInvalidArgument, added_source_ + ": no id for the language code '" + token + "' of " + list_source);
    }
    set_token(token, id, true, source);
    languages_.push_back(scheme_ == FairseqScheme::kM2M100 ? token.substr(2, token.size() - 4) : token);
    language_ids_.push_back(id);
  }
}

int FairseqTokenizer::piece_id(const std::string& piece) const {
  if (spm_offset_ids_) {
    const int sp = sp_.PieceToId(piece);
    return sp > 0 && !sp_.IsUnknown(sp) && !sp_.IsControl(sp) ? sp + 1 : unk_id_;
  }
  const auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? unk_id_ : it->second;
}

std::vector<int> FairseqTokenizer::encode_text(const std::string& text, const std::string& source_language) const {
  const std::string& code = source_language.empty() ? default_source_ : source_language;
  if (code.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "this model needs a source language (its tokenizer_config.json names no src_lang)");
  }
  const int lang = require_language_token(code);
  std::vector<int> ids;
  if (!legacy_) ids.push_back(lang);
  // The text between added tokens goes to SentencePiece piece by piece (each part gets its
  // own word-boundary prefix, its surrounding spaces dropped, as SentencePiece does).
  size_t start = 0;
  for (size_t at = 0; at < text.size();) {
    const std::pair<std::string, int>* match = nullptr;
    for (const auto& t : added_by_byte_[static_cast<unsigned char>(text[at])]) {
      if (text.compare(at, t.first.size(), t.first) == 0) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++at;
      continue;
    }
    encode_pieces(text.substr(start, at - start), &ids);
    ids.push_back(match->second);
    at += match->first.size();
    start = at;
  }
  encode_pieces(text.substr(start), &ids);
  ids.push_back(eos_id_);
  if (legacy_) ids.push_back(lang);
  return ids;
}

void FairseqTokenizer::encode_pieces(const std::string& text, std::vector<int>* ids) const {
  if (text.empty()) return;
  std::vector<std::string> pieces;
  sp_.Encode(text, &pieces);
  for (const auto& p : pieces) ids->push_back(piece_id(p));
}

std::string FairseqTokenizer::decode(const std::vector<int>& ids) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || id >= model_vocab_) {
      throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is not in the vocabulary");
    }
    // Ids the model has but the tokenizer does not (NLLB-200's last two rows) decode to
    // nothing, as the tokenizers library skips an id it has no token for.
    if (size_t(id) >= id_to_piece_.size() || special_[size_t(id)] || id_to_piece_[size_t(id)].empty()) continue;
    pieces.push_back(id_to_piece_[size_t(id)]);
  }
  std::string text;
  if (metaspace_decode_) {
    for (const auto& p : pieces) text += p;
    if (text.rfind(kSpace, 0) == 0) text.erase(0, 3);  // the prepended space of the first word
    replace_all(&text, kSpace, " ");
  } else {
    // sp_model.decode(tokens).strip(); a piece SentencePiece does not know passes through.
    sp_.Decode(pieces, &text);
    replace_all(&text, kSpace, " ");
    const size_t first = text.find_first_not_of(" \t\n\r\f\v");
    text = first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\n\r\f\v") - first + 1);
  }
  return clean_up_spaces_ ? clean_up_tokenization(text) : text;
}

}  // namespace

std::unique_ptr<Tokenizer> load_fairseq_tokenizer(const std::string& model_dir, const ModelConfig& config,
                                                  FairseqScheme scheme, const nlohmann::json& tokenizer_config) {
  return std::make_unique<FairseqTokenizer>(model_dir, config, scheme, tokenizer_config);
}

}  // namespace nmt
