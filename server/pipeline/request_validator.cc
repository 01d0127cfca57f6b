#include "server/pipeline/request_validator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "model/error.h"
#include "model/text/excerpt.h"

namespace nmt::server {
namespace {

// Default length cap: 255 matches transformers' max_length 256 (DecodeOptions).
constexpr int kDefaultMaxDecodingLength = 255;
constexpr int kDefaultBeamSize = 4;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

void check_range(const char* option, int value, int lo, int hi, const std::string& hi_name) {
  if (value < lo || value > hi) {
    invalid(std::string("options.") + option + " must be between " + std::to_string(lo) +
            " and " + std::to_string(hi) + " (" + hi_name + "), got " + std::to_string(value));
  }
}

bool only_whitespace(const std::string& text) {
  return std::all_of(text.begin(), text.end(),
                     [](unsigned char c) { return std::isspace(c) != 0; });
}

}  // namespace

size_t find_invalid_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t len;
    unsigned cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const unsigned min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

size_t count_characters(const std::string& text) {
  // Every byte but UTF-8's continuation bytes (10xxxxxx) starts a code point.
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

size_t count_characters(const v1::TranslateRequest& request) {
  size_t n = 0;
  for (const std::string& text : request.texts()) n += count_characters(text);
  return n;
}

bool valid_request_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](unsigned char c) { return c >= 0x20 && c <= 0x7e; });
}

ValidRequest RequestValidator::validate(const v1::TranslateRequest& request,
                                       const TokenizeFn& tokenize, const SplitFn& split,
                                       const TokenizeFn& tokenize_target) const {
  if (!request.request_id().empty() && !valid_request_id(request.request_id())) {
    invalid("request_id must be 1 to " + std::to_string(kMaxRequestIdBytes) +
            " printable ASCII characters (it is echoed as the x-request-id metadata)");
  }
  const std::vector<std::string> texts(request.texts().begin(), request.texts().end());
  check_texts(texts);
  ValidRequest valid;
  valid.options = decode_options(request.options());
  // target_prefix (docs/decoding.md): text or ids, one prefix for every text of the request.
  if (!request.options().target_prefix().empty()) {
    if (!tokenize_target) throw Error(ErrorCode::kInternal, "target tokenization is not available here");
    valid.options.target_prefix = tokenize_target(request.options().target_prefix());
    if (valid.options.target_prefix.empty()) invalid("options.target_prefix has no tokens");
  }
  // What DecodeOptions::validate refuses of a prefix, named as the request spells it: a prefix
  // leaves a token to generate, and the draws of sampling keep no prompt or alignments.
  const int forced_first = valid.options.forced_bos_id >= 0 ? 1 : 0;
  if (!valid.options.target_prefix.empty() &&
      int(valid.options.target_prefix.size()) + forced_first >= valid.options.max_decoding_length) {
    invalid("options.target_prefix has " + std::to_string(valid.options.target_prefix.size()) +
            " tokens: it leaves no token to generate under max_decoding_length " +
            std::to_string(valid.options.max_decoding_length));
  }
  if (valid.options.samples() && !valid.options.target_prefix.empty())
    invalid("options.target_prefix cannot be combined with sampling");
  if (valid.options.samples() && valid.options.return_alignments)
    invalid("options.return_alignments cannot be combined with sampling");
  if (splits(request.options())) {
    if (!split) throw Error(ErrorCode::kInternal, "sentence splitting is not available here");
    split_texts(texts, tokenize, split, valid);
    if (!valid.options.target_prefix.empty()) {
      for (size_t i = 0; i < valid.split.size(); ++i) {
        if (valid.split[i].sentences.size() > 1) {
          invalid("texts[" + std::to_string(i) + "] splits into " + std::to_string(valid.split[i].sentences.size()) +
                  " sentences: options.target_prefix continues one sentence (send split_sentences false, "
                  "or the sentence alone)");
        }
      }
    }
    return valid;
  }
  valid.source_ids.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    valid.source_ids.push_back(tokenize(texts[i]));
    check_length(i, valid.source_ids.back().size());
    valid.input_tokens += static_cast<int64_t>(valid.source_ids.back().size());
  }
  return valid;
}

void RequestValidator::split_texts(const std::vector<std::string>& texts, const TokenizeFn& tokenize,
                                   const SplitFn& split, ValidRequest& valid) const {
  size_t sentences = 0;
  for (const std::string& text : texts) {
    valid.split.push_back(split(text));
    sentences += valid.split.back().sentences.size();
  }
  valid.source_ids.reserve(sentences);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<std::string>& parts = valid.split[i].sentences;
    for (size_t k = 0; k < parts.size(); ++k) {
      valid.source_ids.push_back(tokenize(parts[k]));
      const size_t tokens = valid.source_ids.back().size();
      if (tokens > static_cast<size_t>(limits_.max_input_tokens)) {
        invalid("texts[" + std::to_string(i) + "] sentence " + std::to_string(k) + " (\"" +
                text_excerpt(parts[k]) + "\") has " + std::to_string(tokens) +
                " tokens, more than limits.max_input_tokens (" +
                std::to_string(limits_.max_input_tokens) +
                "); split it into shorter sentences (input is never truncated)");
      }
      valid.input_tokens += static_cast<int64_t>(tokens);
    }
  }
}

void RequestValidator::check_texts(const std::vector<std::string>& texts) const {
  if (texts.empty()) invalid("texts is empty: send at least one sentence");
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = "texts[" + std::to_string(i) + "]";
    if (only_whitespace(texts[i])) invalid(where + " is empty (or only whitespace)");
    const size_t bad = find_invalid_utf8(texts[i]);
    if (bad != std::string::npos) {
      invalid(where + " is not valid UTF-8 (invalid byte sequence at offset " +
              std::to_string(bad) + ")");
    }
  }
  // Characters, not sentences, bound a request: a long text is translated whole, its
  // sentences spread over the decode loops like any others.
  size_t characters = 0;
  for (const std::string& text : texts) characters += count_characters(text);
  if (characters > static_cast<size_t>(limits_.max_characters_per_request)) {
    invalid("the texts have " + std::to_string(characters) +
            " characters, more than limits.max_characters_per_request (" +
            std::to_string(limits_.max_characters_per_request) +
            "); send the text in several requests");
  }
}

void RequestValidator::check_length(size_t index, size_t tokens) const {
  if (tokens > static_cast<size_t>(limits_.max_input_tokens)) {
    invalid("texts[" + std::to_string(index) + "] has " + std::to_string(tokens) +
            " tokens, more than limits.max_input_tokens (" +
            std::to_string(limits_.max_input_tokens) +
            "); split it into shorter sentences (input is never truncated)");
  }
}

DecodeOptions RequestValidator::decode_options(const v1::TranslateOptions& requested) const {
  DecodeOptions o;
  o.beam_size = requested.has_beam_size()
                    ? requested.beam_size()
                    : std::min(kDefaultBeamSize, limits_.max_beam_size);
  o.num_hypotheses = requested.has_num_hypotheses() ? requested.num_hypotheses() : 1;
  o.length_penalty = requested.has_length_penalty() ? requested.length_penalty() : 1.0f;
  o.max_decoding_length =
      requested.has_max_decoding_length()
          ? requested.max_decoding_length()
          : std::min(kDefaultMaxDecodingLength, limits_.max_decoding_length);
  o.min_decoding_length = requested.has_min_decoding_length() ? requested.min_decoding_length() : 0;
  o.return_scores = requested.return_scores();
  o.return_alignments = requested.return_alignments();
  if (!requested.target_prefix().empty() && requested.target_prefix_ids_size() > 0)
    invalid("options.target_prefix and options.target_prefix_ids are exclusive: set one");
  o.target_prefix.assign(requested.target_prefix_ids().begin(), requested.target_prefix_ids().end());
  for (int id : o.target_prefix) {
    if (id < 0) invalid("options.target_prefix_ids holds a negative id " + std::to_string(id));
  }

  // Sampling (DecodeOptions::samples, docs/decoding.md "Sampling"): CTranslate2's defaults
  // (top-k 1 = greedy); a sampling request's beam defaults to 1, and its num_hypotheses are
  // independent samples, a cache row each, as many as a beam may have.
  o.sampling_topk = requested.has_sampling_topk() ? requested.sampling_topk() : 1;
  o.sampling_topp = requested.has_sampling_topp() ? requested.sampling_topp() : 1.f;
  o.sampling_temperature = requested.has_sampling_temperature() ? requested.sampling_temperature() : 1.f;
  o.has_seed = requested.has_seed();
  o.seed = requested.seed();
  if (o.sampling_topk < 0)
    invalid("options.sampling_topk must be >= 0 (0: the whole vocabulary, 1: greedy), got " +
            std::to_string(o.sampling_topk));
  if (!(o.sampling_topp > 0.f && o.sampling_topp <= 1.f)) {
    std::ostringstream value;
    value << o.sampling_topp;
    invalid("options.sampling_topp must be in (0, 1], got " + value.str());
  }
  if (!(std::isfinite(o.sampling_temperature) && o.sampling_temperature >= 0.f)) {
    std::ostringstream value;
    value << o.sampling_temperature;
    invalid("options.sampling_temperature must be a finite number >= 0 (0: greedy), got " + value.str());
  }
  if (o.samples() && !requested.has_beam_size()) o.beam_size = 1;
  if (o.samples() && o.beam_size != 1)
    invalid("options.beam_size must be 1 when sampling (sampling_topk != 1 and sampling_temperature > 0), got " +
            std::to_string(o.beam_size) + ": num_hypotheses gives independent samples");

  check_range("beam_size", o.beam_size, 1, limits_.max_beam_size, "limits.max_beam_size");
  if (o.samples()) {
    check_range("num_hypotheses", o.num_hypotheses, 1, limits_.max_beam_size,
                "limits.max_beam_size: the samples take a cache row each");
  } else {
    check_range("num_hypotheses", o.num_hypotheses, 1, o.beam_size, "options.beam_size");
  }
  if (!std::isfinite(o.length_penalty)) {
    std::ostringstream value;
    value << o.length_penalty;
    invalid("options.length_penalty must be a finite number, got " + value.str());
  }
  check_range("max_decoding_length", o.max_decoding_length, 1, limits_.max_decoding_length,
              "limits.max_decoding_length");
  // At least one token before the length cap, as the engine requires (DecodeOptions).
  check_range("min_decoding_length", o.min_decoding_length, 0, o.max_decoding_length - 1,
              "options.max_decoding_length - 1");
  return o;
}

// Repetition controls: the request's values (texts tokenized as targets), checked against
// the model's target vocabulary and DecodeOptions' limits with the field named as the request
// spells it (the engine's DecodeOptions::validate_repetition checks the same again, in
// nmt_model, which this library does not link).
void RequestValidator::repetition_controls(const v1::TranslateOptions& requested, const TokenizeFn& tokenize_target,
                                           int target_vocab_size, int eos_id, DecodeOptions* o) {
  o->no_repeat_ngram_size = requested.no_repeat_ngram_size();
  check_range("no_repeat_ngram_size", o->no_repeat_ngram_size, 0, DecodeOptions::kMaxNoRepeatNgramSize,
              "the most supported");
  o->repetition_penalty = requested.has_repetition_penalty() ? requested.repetition_penalty() : 1.f;
  if (!std::isfinite(o->repetition_penalty) || !(o->repetition_penalty > 0.f)) {
    std::ostringstream value;
    value << o->repetition_penalty;
    invalid("options.repetition_penalty must be a finite number above 0 (1: off), got " + value.str());
  }
  const size_t count = size_t(requested.suppress_sequences_size()) + size_t(requested.suppress_token_ids_size());
  if (count > size_t(DecodeOptions::kMaxSuppressSequences))
    invalid("options.suppress_sequences and suppress_token_ids hold " + std::to_string(count) +
            " sequences; at most " + std::to_string(DecodeOptions::kMaxSuppressSequences) + " are accepted");
  o->suppress_sequences.clear();
  for (int i = 0; i < requested.suppress_sequences_size(); ++i) {
    const std::string which = "options.suppress_sequences[" + std::to_string(i) + "]";
    std::vector<int> ids = tokenize_target(requested.suppress_sequences(i));
    if (ids.empty()) invalid(which + " has no tokens");
    if (ids.size() > size_t(DecodeOptions::kMaxSuppressSequenceTokens))
      invalid(which + " has " + std::to_string(ids.size()) + " tokens; at most " +
              std::to_string(DecodeOptions::kMaxSuppressSequenceTokens) + " are accepted");
    o->suppress_sequences.push_back(std::move(ids));
  }
  for (int id : requested.suppress_token_ids()) {
    if (id < 0 || id >= target_vocab_size)
      invalid("options.suppress_token_ids holds " + std::to_string(id) + ", outside the target vocabulary (0.." +
              std::to_string(target_vocab_size - 1) + ")");
    if (id == eos_id)
      invalid("options.suppress_token_ids holds the end-of-sentence token " + std::to_string(id) +
              ": no hypothesis could end");
    o->suppress_sequences.push_back({id});
  }
}

ValidScore RequestValidator::validate_score(const v1::ScoreRequest& request, const TokenizeFn& tokenize,
                                           const TokenizeFn& tokenize_target) const {
  if (!request.request_id().empty() && !valid_request_id(request.request_id())) {
    invalid("request_id must be 1 to " + std::to_string(kMaxRequestIdBytes) +
            " printable ASCII characters (it is echoed as the x-request-id metadata)");
  }
  const v1::TranslateOptions& requested = request.options();
  // Options of a search, which a score does not run.
  if (requested.has_beam_size()) invalid("options.beam_size does not apply to Score (it runs no search)");
  if (requested.has_num_hypotheses()) invalid("options.num_hypotheses does not apply to Score");
  if (requested.has_min_decoding_length()) invalid("options.min_decoding_length does not apply to Score");
  if (!requested.target_prefix().empty() || requested.target_prefix_ids_size() > 0)
    invalid("options.target_prefix does not apply to Score (the target is given whole)");
  if (requested.glossary_size() > 0) invalid("options.glossary does not apply to Score (the target is given whole)");
  if (requested.has_split_sentences() && requested.split_sentences())
    invalid("options.split_sentences does not apply to Score (each pair is one sentence)");
  const std::vector<std::string> sources(request.sources().begin(), request.sources().end());
  const std::vector<std::string> targets(request.targets().begin(), request.targets().end());
  if (targets.size() != sources.size()) {
    invalid("targets has " + std::to_string(targets.size()) + " entries for " + std::to_string(sources.size()) +
            " sources: one translation per source");
  }
  try {
    check_texts(sources);
  } catch (const Error& e) {  // the texts' messages, named for this request's field
    std::string m = e.what();
    for (size_t at; (at = m.find("texts")) != std::string::npos;) m.replace(at, 5, "sources");
    invalid(m);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string where = "targets[" + std::to_string(i) + "]";
    if (only_whitespace(targets[i])) invalid(where + " is empty (or only whitespace)");
    if (find_invalid_utf8(targets[i]) != std::string::npos) invalid(where + " is not valid UTF-8");
  }
  ValidScore valid;
  valid.options = decode_options(requested);
  valid.options.beam_size = 1;
  valid.options.num_hypotheses = 1;
  valid.options.score = true;
  for (size_t i = 0; i < sources.size(); ++i) {
    valid.source_ids.push_back(tokenize(sources[i]));
    const size_t tokens = valid.source_ids.back().size();
    if (tokens > static_cast<size_t>(limits_.max_input_tokens)) {
      invalid("sources[" + std::to_string(i) + "] has " + std::to_string(tokens) +
              " tokens, more than limits.max_input_tokens (" + std::to_string(limits_.max_input_tokens) + ")");
    }
    valid.input_tokens += static_cast<int64_t>(tokens);
    valid.target_ids.push_back(tokenize_target(targets[i]));
    if (valid.target_ids.back().empty()) invalid("targets[" + std::to_string(i) + "] has no tokens");
  }
  return valid;
}

}  // namespace nmt::server
