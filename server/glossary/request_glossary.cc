#include "server/glossary/request_glossary.h"

#include <algorithm>
#include <map>

#include "model/error.h"
#include "server/pipeline/request_validator.h"

namespace nmt::server {
namespace {
[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }
}  // namespace

std::vector<GlossaryEntry> request_glossary(const v1::TranslateOptions& options, const Limits& limits) {
  if (options.glossary_size() > limits.max_glossary_entries)
    invalid("options.glossary holds " + std::to_string(options.glossary_size()) + " entries; at most " +
            std::to_string(limits.max_glossary_entries) + " are accepted (limits.max_glossary_entries)");
  std::vector<GlossaryEntry> out;
  for (int i = 0; i < options.glossary_size(); ++i) {
    const v1::GlossaryEntry& e = options.glossary(i);
    const std::string which = "options.glossary[" + std::to_string(i) + "]";
    for (const auto& [name, term] : {std::pair{".source", &e.source()}, std::pair{".target", &e.target()}}) {
      if (term->find_first_not_of(" \t\r\n") == std::string::npos) invalid(which + name + " is empty");
      if (find_invalid_utf8(*term) != std::string::npos) invalid(which + name + " is not valid UTF-8");
      const size_t chars = count_characters(*term);
      if (chars > size_t(limits.max_glossary_term_characters))
        invalid(which + name + " has " + std::to_string(chars) + " characters; at most " +
                std::to_string(limits.max_glossary_term_characters) + " (limits.max_glossary_term_characters)");
    }
    out.push_back({e.source(), e.target()});
  }
  return out;
}

std::vector<std::vector<std::vector<int>>> sentence_phrases(const std::vector<GlossaryEntry>& model,
                                                            const std::vector<GlossaryEntry>& request,
                                                            const std::vector<std::string>& sentences,
                                                            const EncodeTargetFn& encode_target,
                                                            const DecodeOptions& options) {
  std::vector<std::vector<std::vector<int>>> out(sentences.size());
  std::map<std::string, std::vector<int>> tokens;  // per target term, tokenized once
  bool any = false;
  for (size_t s = 0; s < sentences.size(); ++s) {
    for (const auto* entries : {&model, &request}) {
      for (size_t i : glossary_matches(*entries, sentences[s])) {
        const GlossaryEntry& e = (*entries)[i];
        auto [at, fresh] = tokens.try_emplace(e.target);
        if (fresh) at->second = encode_target(e.target);
        const std::string which = entries == &model ? "the model's glossary entry \"" + e.source + "\""
                                                    : "options.glossary[" + std::to_string(i) + "]";
        if (at->second.empty()) invalid(which + ".target \"" + e.target + "\" has no target tokens");
        std::vector<std::vector<int>>& p = out[s];
        if (std::find(p.begin(), p.end(), at->second) == p.end()) p.push_back(at->second);
      }
    }
    if (out[s].empty()) continue;
    any = true;
    DecodeOptions o = options;
    o.glossary_phrases = out[s];
    try {
      o.validate_glossary();
    } catch (const Error& e) {
      invalid("options." + std::string(e.what()) + " (sentence " + std::to_string(s) +
              (options.samples() || !options.target_prefix.empty() || options.repetition_controls()
                   ? "; a model glossary applies too unless options.ignore_model_glossary"
                   : "") +
              ")");
    }
  }
  if (!any) out.clear();
  return out;
}

std::vector<std::vector<std::vector<int>>> request_phrases(const v1::TranslateRequest& request,
                                                           const std::vector<SplitText>& split,
                                                           const std::vector<GlossaryEntry>& model, const Limits& limits,
                                                           const EncodeTargetFn& encode_target,
                                                           const DecodeOptions& options) {
  const std::vector<GlossaryEntry> entries = request_glossary(request.options(), limits);
  if (!entries.empty()) {  // refused whether or not a term occurs: the answer does not hang on the texts
    try {
      options.validate_glossary_use();
    } catch (const Error& e) {
      invalid("options." + std::string(e.what()));
    }
  }
  const bool with_model = !model.empty() && !request.options().ignore_model_glossary();
  if (entries.empty() && !with_model) return {};
  std::vector<std::string> sentences;
  if (split.empty()) {
    sentences.assign(request.texts().begin(), request.texts().end());
  } else {
    for (const SplitText& t : split) sentences.insert(sentences.end(), t.sentences.begin(), t.sentences.end());
  }
  static const std::vector<GlossaryEntry> kNone;
  return sentence_phrases(with_model ? model : kNone, entries, sentences, encode_target, options);
}

}  // namespace nmt::server
