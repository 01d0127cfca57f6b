// Tokenizer::load picks the scheme; the language-code lookups every scheme shares.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>

#include "model/error.h"
#include "model/tokenizer/tokenizer_files.h"
#include "model/tokenizer/tokenizer_schemes.h"

namespace nmt {

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir, const ModelConfig& config) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  const nlohmann::json tokenizer_config = tokenizer_files::read_optional_object(config_path, "tokenizer config");
  std::string cls = tokenizer_files::string_field(tokenizer_config, "tokenizer_class", "", config_path);
  // transformers 4's fast twins load as the same scheme.
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  // The tokenizer must be the model's family's (config.json model_type).
  auto family_must_be = [&](Family want) {
    if (config.arch.family != want) {
      throw Error(ErrorCode::kInvalidArgument,
                  config_path + ": tokenizer_class '" + cls + "' does not go with config.json's model_type '" +
                      family_name(config.arch.family) + "'");
    }
  };
  if (cls == "MarianTokenizer") {
    family_must_be(Family::kMarian);
    return load_marian_tokenizer(model_dir, config, tokenizer_config);
  }
  const std::pair<const char*, std::pair<FairseqScheme, Family>> kFairseq[] = {
      {"NllbTokenizer", {FairseqScheme::kNllb, Family::kM2M100}},
      {"M2M100Tokenizer", {FairseqScheme::kM2M100, Family::kM2M100}},
      {"MBart50Tokenizer", {FairseqScheme::kMBart50, Family::kMBart}}};
  for (const auto& [name, scheme] : kFairseq) {
    if (cls != name) continue;
    family_must_be(scheme.second);
    return load_fairseq_tokenizer(model_dir, config, scheme.first, tokenizer_config);
  }
  if (!cls.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                config_path + ": field 'tokenizer_class' is '" + cls +
                    "'; supported: MarianTokenizer, NllbTokenizer, M2M100Tokenizer, MBart50Tokenizer");
  }
  // Marian exports older than tokenizer_class, and hand-made folders: Marian's files say it.
  if (config.arch.family == Family::kMarian && tokenizer_files::exists(model_dir + "/source.spm")) {
    return load_marian_tokenizer(model_dir, config, tokenizer_config);
  }
  tokenizer_files::require(model_dir, "tokenizer_config.json", "it names the tokenizer class and its languages");
  throw Error(ErrorCode::kInvalidArgument,
              config_path + ": no field 'tokenizer_class' (NllbTokenizer, M2M100Tokenizer, MBart50Tokenizer or "
                            "MarianTokenizer): cannot tell the tokenizer of model_type '" +
                  family_name(config.arch.family) + "'");
}

namespace {
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
}  // namespace

std::vector<TextSpan> Tokenizer::source_spans(const std::string& text, const std::string& source_language) const {
  std::vector<TextSpan> spans;
  encode_text(text, source_language, &spans);
  for (TextSpan& s : spans) {
    s.end = std::min(s.end, text.size());
    s.begin = std::min(s.begin, s.end);
    while (s.begin < s.end && is_space(text[s.begin])) ++s.begin;
  }
  return spans;
}

// decode() of each prefix: quadratic in the length, but only for sentences that ask, and
// exact for every scheme without knowing how it joins pieces (clean-ups and strips included,
// within the clamp).
std::vector<TextSpan> Tokenizer::target_spans(const std::vector<int>& ids, const std::string& text) const {
  std::vector<TextSpan> spans(ids.size());
  size_t end = 0;
  std::vector<int> prefix;
  for (size_t i = 0; i < ids.size(); ++i) {
    prefix.push_back(ids[i]);
    const size_t next = std::max(end, std::min(decode(prefix).size(), text.size()));
    size_t begin = end;
    while (begin < next && is_space(text[begin])) ++begin;
    spans[i] = {begin, next};
    end = next;
  }
  return spans;
}

int Tokenizer::language_token(const std::string& code) const {
  const auto it = std::find(languages_.begin(), languages_.end(), code);
  return it == languages_.end() ? -1 : language_ids_[size_t(it - languages_.begin())];
}

int Tokenizer::require_language_token(const std::string& code) const {
  const int id = language_token(code);
  if (id >= 0) return id;
  std::string known;
  for (const auto& c : languages_) known += (known.empty() ? "" : ", ") + c;
  throw Error(ErrorCode::kInvalidArgument,
              "language '" + code + "' is not a code of this model" +
                  (known.empty() ? std::string(" (a bilingual model takes no language code)") : " (it has: " + known + ")"));
}

}  // namespace nmt
