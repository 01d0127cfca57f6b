#pragma once
// Checks one request against the serving limits before any work is queued. Every failure
// throws nmt::Error(kInvalidArgument) with a message that names the sentence or option and
// the limit; nothing is truncated or silently adjusted.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/decoding/decode_options.h"
#include "nmt/v1/translation.pb.h"
#include "server/pipeline/limits.h"
#include "model/text/sentence_splitter.h"

namespace nmt::server {

// A request that passed every check: what the scheduler needs.
struct ValidRequest {
  // One per sentence, </s> included: a text's own, or its sentences' in order when split.
  std::vector<std::vector<int>> source_ids;
  DecodeOptions options;
  int64_t input_tokens = 0;
  // With split_sentences, one per text (empty otherwise): its sentences and whitespace.
  std::vector<SplitText> split;
};

using TokenizeFn = std::function<std::vector<int>(const std::string& text)>;

// A Score request that passed every check.
struct ValidScore {
  std::vector<std::vector<int>> source_ids, target_ids;  // per pair; targets without </s>
  DecodeOptions options;
  int64_t input_tokens = 0;
};
using SplitFn = std::function<SplitText(const std::string& text)>;

class RequestValidator {
 public:
  explicit RequestValidator(Limits limits) : limits_(limits) {}

  // The whole admission check of one request, in the order the server applies it:
  // request_id, texts, options, then each text's token length (tokenized with `tokenize`);
  // with split_sentences, each text is cut with `split` and each sentence's length is
  // checked instead.
  // `tokenize_target` makes options.target_prefix's ids (Translator::encode_target); a
  // text prefix without it is refused. With split_sentences, a text that splits into several
  // sentences takes no target_prefix (refused naming it: a prefix continues one sentence).
  ValidRequest validate(const v1::TranslateRequest& request, const TokenizeFn& tokenize,
                        const SplitFn& split = {}, const TokenizeFn& tokenize_target = {}) const;
  // A Score request (docs/server.md, "Score"): as many targets as sources, each text
  // checked as texts are, the options that do not apply refused naming them; its pairs'
  // source ids (tokenize) and target ids (tokenize_target), and the DecodeOptions every pair
  // shares (beam 1, score set; each pair's score_target is the caller's to set).
  ValidScore validate_score(const v1::ScoreRequest& request, const TokenizeFn& tokenize,
                            const TokenizeFn& tokenize_target) const;
  // Whether the request's texts are split into sentences (its option, else the default).
  bool splits(const v1::TranslateOptions& requested) const {
    return requested.has_split_sentences() ? requested.split_sentences() : limits_.split_sentences;
  }

  // Emptiness and UTF-8 of the texts (a gRPC parse already refuses invalid UTF-8 in these
  // proto strings; the HTTP API builds requests from bodies it decoded itself), and their
  // characters together against limits.max_characters_per_request.
  void check_texts(const std::vector<std::string>& texts) const;
  // Tokenized length of texts[index] (</s> included) against limits.max_input_tokens.
  void check_length(size_t index, size_t tokens) const;
  // The request's options with the server defaults filled in, range-checked.
  DecodeOptions decode_options(const v1::TranslateOptions& requested) const;
  // Repetition controls into *o (no_repeat_ngram_size, repetition_penalty, the suppressed
  // sequences: texts through tokenize_target, then the single ids); throws
  // nmt::Error(kInvalidArgument) naming the field.
  static void repetition_controls(const v1::TranslateOptions& requested, const TokenizeFn& tokenize_target,
                                  int target_vocab_size, int eos_id, DecodeOptions* o);

  const Limits& limits() const { return limits_; }

 private:
  // Cuts every text into sentences (into valid.split), then checks each sentence's length,
  // filling valid.source_ids and input_tokens.
  void split_texts(const std::vector<std::string>& texts, const TokenizeFn& tokenize,
                   const SplitFn& split, ValidRequest& valid) const;

  Limits limits_;
};

// Whether a client's request_id can be echoed as gRPC metadata (x-request-id) and in log
// lines: 1 to 128 printable ASCII characters. gRPC aborts the process on a metadata value
// with a control character, so anything else is refused (and never echoed).
bool valid_request_id(const std::string& id);
constexpr size_t kMaxRequestIdBytes = 128;

// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid UTF-8
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t find_invalid_utf8(const std::string& text);
// Unicode code points of valid UTF-8 `text`: what limits.max_characters_per_request counts.
size_t count_characters(const std::string& text);
// A request's texts' code points together, as LibreTranslate counts them (Python's len): what
// the API keys' character quotas charge.
size_t count_characters(const v1::TranslateRequest& request);

}  // namespace nmt::server
