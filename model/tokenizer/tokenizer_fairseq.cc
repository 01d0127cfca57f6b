// The fairseq-dictionary tokenizers of NLLB-200, M2M-100 and mBART-50, id for id as
// transformers' NllbTokenizer, M2M100Tokenizer and MBart50Tokenizer load a folder that
// save_pretrained wrote:
// - ids: <s> 0, <pad> 1, </s> 2, <unk> 3, then the SentencePiece pieces (NLLB / mBART-50: the
//   spm id + 1, tokenizer.json's vocabulary where the folder has one; M2M-100: vocab.json),
//   then the language codes, then <mask> (NLLB / mBART-50). The codes and their ids are read
//   from the folder (tokenizer.json added_tokens, tokenizer_config.json added_tokens_decoder /
//   extra_special_tokens / additional_special_tokens, special_tokens_map.json), so a model with
//   its own code list works; only an M2M-100 folder that lists none takes M2M100Tokenizer's
//   built-in list its language_codes names.
// - source: [src_lang] X </s>; NLLB with legacy_behaviour: X </s> [src_lang]. Text that spells
//   an added token is that token.
// - decode(skip_special_tokens=True): the specials, <mask> and the codes the folder declares
//   special dropped, pieces joined as SentencePiece / the Metaspace decoder do.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include "model/error.h"
#include "model/tokenizer/tokenizer_files.h"
#include "model/tokenizer/tokenizer_schemes.h"

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
  std::vector<int> encode_target(const std::string& text) const override;
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
    bool lstrip = false, rstrip = false;  // the match takes the spaces on its left / right
  };
  std::unordered_map<std::string, Added> added_;  // added tokens (specials, codes, <mask>)
  std::string added_source_;                    // the file added_ came from
  // The added tokens by first byte, longest first: text that spells one is that token (as
  // transformers splits the text on its added tokens before SentencePiece sees it).
  struct Splitter {
    std::string text;
    int id;
    bool lstrip, rstrip;
  };
  std::vector<std::vector<Splitter>> added_by_byte_;
  int unk_id_ = -1, eos_id_ = -1;
  // config.json's vocab_size: every id of the tokenizer must be below it. It may be larger
  // than the tokenizer: NLLB-200's is 256206 for 256204 tokens, M2M-100 has 8 "madeup words".
  int model_vocab_ = 0;
  bool legacy_ = false;
  bool clean_up_spaces_ = false;
  // transformers 5 runs NLLB / mBART-50 through the tokenizers library (tokenizer.json:
  // Metaspace pre-tokenizer and decoder: a trailing space is a word, one leading space of the
  // first piece is dropped when decoding); M2M-100 through SentencePiece (decode, strip()).
  bool tokenizers_backend_ = true;
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
  files::require(model_dir, "sentencepiece.bpe.model", std::string("the SentencePiece model ") + scheme_class(scheme) +
                                                           " splits text with; tokenizer.json alone is not read");
  if (scheme == FairseqScheme::kM2M100) files::require(model_dir, "vocab.json", "M2M100Tokenizer's piece -> id table");
  sp_path_ = model_dir + "/sentencepiece.bpe.model";
  const auto status = sp_.Load(sp_path_);
  if (!status.ok()) {
    throw Error(ErrorCode::kInvalidArgument,
                sp_path_ + ": not a valid SentencePiece model (" + std::string(status.ToString()) + ")");
  }
  tokenizers_backend_ = scheme != FairseqScheme::kM2M100;
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
      added_[files::token_content(t)] = {t["id"].get<int>(), files::bool_field(t, "special", true, json_path),
                                         files::bool_field(t, "lstrip", false, json_path),
                                         files::bool_field(t, "rstrip", false, json_path)};
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
      added_[files::token_content(it.value())] = {id, files::bool_field(it.value(), "special", true, config_path),
                                                  files::bool_field(it.value(), "lstrip", false, config_path),
                                                  files::bool_field(it.value(), "rstrip", false, config_path)};
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
    const bool added = a != added_.end() && a->second.id == int(id);
    if (!t.empty() && (special_[id] || added)) {
      added_by_byte_[static_cast<unsigned char>(t[0])].push_back(
          {t, int(id), added && a->second.lstrip, added && a->second.rstrip});
    }
  }
  for (auto& list : added_by_byte_) {
    std::sort(list.begin(), list.end(), [](const Splitter& a, const Splitter& b) { return a.text.size() > b.text.size(); });
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
  // The lists hold the named specials too (mBART-50's extra_special_tokens start <s>, </s>).
  std::unordered_set<std::string> named;
  for (const auto& [field, name] : {std::pair<const char*, const char*>{"bos_token", "<s>"}, {"pad_token", "<pad>"},
                                    {"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"mask_token", "<mask>"},
                                    {"sep_token", "</s>"}, {"cls_token", "<s>"}}) {
    named.insert(files::string_field(tokenizer_config, field, name, config_path));
  }
  auto is_code = [&](const std::string& t) {
    return named.count(t) == 0 && (scheme_ != FairseqScheme::kM2M100 || is_m2m_token(t));
  };
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
    if (!object->contains(where.first) || !(*object)[where.first].is_array()) continue;
    for (const auto& t : (*object)[where.first]) {
      const std::string s = files::token_content(t);
      if (s.empty()) {
        throw Error(ErrorCode::kInvalidArgument, *where.second + ": an entry of '" + where.first + "' is not a token");
      }
      if (is_code(s)) tokens.push_back(s);
    }
    list_source = *where.second + " '" + where.first + "'";
    if (!tokens.empty()) break;
  }
  // Else the special added tokens that are not the named ones (a tokenizer.json alone).
  if (tokens.empty() && tokenizer_json.contains("added_tokens")) {
    for (const auto& [token, a] : added_) {
      if (a.special && is_code(token)) tokens.push_back(token);
    }
    list_source = model_dir + "/tokenizer.json 'added_tokens'";
  }
  // Else M2M100Tokenizer's own list, which transformers keeps in its code and a folder that
  // transformers 5 saved names only by tokenizer_config.json's language_codes. Such a folder
  // declares no code a special token, so transformers' decode(skip_special_tokens=True) keeps
  // their text ("__de__ Das ...") and its tokenizer does not split them out of a text: so here.
  bool special = true;
  if (tokens.empty() && scheme_ == FairseqScheme::kM2M100) {
    special = false;
    const std::string set = files::string_field(tokenizer_config, "language_codes", "m2m100", config_path);
    static const std::vector<std::string> kM2M100 = {
        "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de",
        "el", "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr",
        "ht", "hu", "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg",
        "ln", "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or",
        "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw",
        "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu"};
    static const std::vector<std::string> kWmt21 = {"en", "ha", "is", "ja", "cs", "ru", "zh", "de"};
    if (set != "m2m100" && set != "wmt21") {
      throw Error(ErrorCode::kInvalidArgument,
                  config_path + ": field 'language_codes' is '" + set + "'; M2M100Tokenizer knows m2m100 and wmt21");
    }
    for (const auto& code : set == "m2m100" ? kM2M100 : kWmt21) tokens.push_back("__" + code + "__");
    list_source = config_path + " 'language_codes' " + set;
  }
  if (tokens.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                config_path + ": no language codes (no 'extra_special_tokens' / 'additional_special_tokens' here or in "
                              "special_tokens_map.json, no added tokens in tokenizer.json)");
  }
  // Without tokenizer.json the classes number the codes after the pieces, in list order.
  const bool computed_ids = !tokenizer_json.contains("added_tokens");
  const int first_code_id = scheme_ == FairseqScheme::kM2M100 ? int(piece_to_id_.size()) : sp_.GetPieceSize() + 1;
  std::unordered_set<std::string> seen;
  std::vector<std::pair<int, std::string>> by_id;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    if (!seen.insert(token).second) throw Error(ErrorCode::kInvalidArgument, list_source + ": code '" + token + "' listed twice");
    int id = -1;
    std::string source = added_source_;
    if (auto a = added_.find(token); a != added_.end()) {
      id = a->second.id;
    } else if (computed_ids) {
      id = first_code_id + int(i);
      source = list_source;
    } else {
      throw Error(ErrorCode::kInvalidArgument, added_source_ + ": no id for the language code '" + token + "' of " + list_source);
    }
    set_token(token, id, special, source);
    by_id.emplace_back(id, scheme_ == FairseqScheme::kM2M100 ? token.substr(2, token.size() - 4) : token);
  }
  std::sort(by_id.begin(), by_id.end());
  for (const auto& [id, code] : by_id) {
    languages_.push_back(code);
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
    const Splitter* match = nullptr;
    for (const auto& t : added_by_byte_[static_cast<unsigned char>(text[at])]) {
      if (text.compare(at, t.text.size(), t.text) == 0) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++at;
      continue;
    }
    size_t before = at;  // where the text before the token ends
    if (match->lstrip) {
      while (before > start && std::isspace(static_cast<unsigned char>(text[before - 1]))) --before;
    }
    encode_pieces(text.substr(start, before - start), &ids);
    ids.push_back(match->id);
    at += match->text.size();
    if (match->rstrip) {
      while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
    }
    start = at;
  }
  encode_pieces(text.substr(start), &ids);
  ids.push_back(eos_id_);
  if (legacy_) ids.push_back(lang);
  return ids;
}

// The families share one SentencePiece model and dictionary between the sides: the source
// encoding (added tokens included) without its language code and </s>.
std::vector<int> FairseqTokenizer::encode_target(const std::string& text) const {
  const std::string& code = !default_source_.empty() ? default_source_ : languages_.empty() ? std::string() : languages_[0];
  std::vector<int> ids = encode_text(text, code);
  if (legacy_) ids.pop_back();  // [pieces, </s>, code]
  else ids.erase(ids.begin());  // [code, pieces, </s>]
  ids.pop_back();
  return ids;
}

// Whether a UTF-8 character is one that the nmt_nfkc normalization turns into a space.
bool is_space_char(const std::string& s, size_t at, size_t* length) {
  const unsigned char c = static_cast<unsigned char>(s[at]);
  *length = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  if (at + *length > s.size()) return false;
  uint32_t cp = c & (c < 0xE0 ? 0x1F : c < 0xF0 ? 0x0F : 0x07);
  for (size_t i = 1; i < *length; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[at + i]) & 0x3F);
  return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void FairseqTokenizer::encode_pieces(const std::string& text, std::vector<int>* ids) const {
  if (text.empty()) return;
  const auto spt = sp_.EncodeAsImmutableProto(text);
  size_t end = 0;  // where the last piece's text ends; SentencePiece drops what follows
  for (const auto& p : spt.pieces()) {
    end = p.end();
    if (sp_.IsUnknown(int(p.id()))) ids->push_back(unk_id_);
    else ids->push_back(spm_offset_ids_ ? int(p.id()) + 1 : piece_id(p.piece()));
  }
  // The tokenizers library's pipeline (these classes in transformers 5) keeps a space at the
  // end of the text, after collapsing runs of them, as a word of its own ("\u2581"), where
  // SentencePiece drops it. transformers' M2M100Tokenizer is SentencePiece's.
  if (!tokenizers_backend_) return;
  for (size_t at = end, n = 1; at < text.size(); at += n) {
    if (is_space_char(text, at, &n)) {
      ids->push_back(piece_id(kSpace));
      return;
    }
  }
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
  if (tokenizers_backend_) {
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
