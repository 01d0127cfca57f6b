#include "model/decoding/decode_options.h"

#include <cmath>
#include <sstream>

#include "model/error.h"

namespace nmt {
namespace {
[[noreturn]] void invalid(const std::string& msg) { throw Error(ErrorCode::kInvalidArgument, msg); }
std::string number(float x) {  // as a user wrote it: 1.5, not 1.500000
  std::ostringstream s;
  s << x;
  return s.str();
}
}  // namespace

void DecodeOptions::validate(int max_beam, int max_length) const {
  if (beam_size < 1 || beam_size > max_beam) {
    invalid("beam_size must be between 1 and " + std::to_string(max_beam) + ", got " + std::to_string(beam_size));
  }
  if (samples()) {
    validate_sampling(max_beam);
  } else if (num_hypotheses < 1 || num_hypotheses > beam_size) {
    invalid("num_hypotheses must be between 1 and beam_size (" + std::to_string(beam_size) + "), got " +
            std::to_string(num_hypotheses));
  }
  if (sampling_topk < 0) invalid("sampling_topk must be >= 0 (0: the whole vocabulary), got " + std::to_string(sampling_topk));
  if (!(sampling_topp > 0.f && sampling_topp <= 1.f))
    invalid("sampling_topp must be in (0, 1], got " + number(sampling_topp));
  if (!(std::isfinite(sampling_temperature) && sampling_temperature >= 0.f))
    invalid("sampling_temperature must be a finite number >= 0 (0: greedy), got " + number(sampling_temperature));
  if (forced_bos_id < -1) invalid("forced_bos_id must be a token id or -1, got " + std::to_string(forced_bos_id));
  if (!std::isfinite(length_penalty)) invalid("length_penalty must be a finite number");
  if (max_decoding_length < 1 || max_decoding_length > max_length) {
    invalid("max_decoding_length must be between 1 and " + std::to_string(max_length) + ", got " +
            std::to_string(max_decoding_length));
  }
  if (min_decoding_length < 0 || min_decoding_length >= max_decoding_length) {
    invalid("min_decoding_length must be between 0 and max_decoding_length - 1 (" +
            std::to_string(max_decoding_length - 1) + "), got " + std::to_string(min_decoding_length));
  }
  validate_prompt();
  if (constrained()) validate_glossary();
}

// Glossary: constrained beam search over the phrases, from the host (SentenceSearch). What it
// cannot honour is refused: sampling draws its tokens, a score forces them, a prefix or the
// repetition edits would need their own bookkeeping in the banks, and one beam cannot hold
// a constraint bank beside the plain one. The phrases and EOS must fit max_decoding_length
// (after the forced first token): no term is ever dropped for want of room.
void DecodeOptions::validate_glossary() const {
  validate_glossary_use();
  validate_glossary_phrases();
}

void DecodeOptions::validate_glossary_use() const {
  if (samples()) invalid("glossary cannot be combined with sampling");
  if (score) invalid("glossary does not apply to a score request");
  if (!target_prefix.empty()) invalid("glossary cannot be combined with target_prefix");
  if (repetition_controls())
    invalid("glossary cannot be combined with no_repeat_ngram_size, repetition_penalty or suppress_sequences");
  if (beam_size < 2) invalid("glossary needs beam search: beam_size must be at least 2, got " + std::to_string(beam_size));
}

void DecodeOptions::validate_glossary_phrases() const {
  if (glossary_phrases.size() > size_t(kMaxGlossaryPhrases))
    invalid("glossary: " + std::to_string(glossary_phrases.size()) + " entries apply to one sentence; at most " +
            std::to_string(kMaxGlossaryPhrases) + " can be required at once");
  size_t tokens = 0;
  for (size_t i = 0; i < glossary_phrases.size(); ++i) {
    if (glossary_phrases[i].empty()) invalid("glossary: the target term of entry " + std::to_string(i) + " has no tokens");
    for (int id : glossary_phrases[i]) {
      if (id < 0) invalid("glossary: a target term has a negative token id " + std::to_string(id));
    }
    tokens += glossary_phrases[i].size();
  }
  const size_t first = forced_bos_id >= 0 ? 1 : 0;
  if (tokens + first + 1 > size_t(max_decoding_length))
    invalid("glossary: the required target terms of a sentence take " + std::to_string(tokens) + " tokens" +
            (first ? " (after the target language token)" : "") + " and </s>, more than max_decoding_length (" +
            std::to_string(max_decoding_length) + ")");
}

// target_prefix and score: the forced tokens must leave room (at least one generated token
// for a prefix; the target and its EOS within max_decoding_length for a score).
void DecodeOptions::validate_prompt() const {
  const int first = forced_bos_id >= 0 ? 1 : 0;
  if (!target_prefix.empty() && score) invalid("target_prefix cannot be combined with a score request");
  for (int id : target_prefix) {
    if (id < 0) invalid("target_prefix has a negative token id " + std::to_string(id));
  }
  if (!target_prefix.empty() && int(target_prefix.size()) + first >= max_decoding_length) {
    invalid("target_prefix has " + std::to_string(target_prefix.size()) + " tokens" +
            (first ? " (after the target language token)" : "") + ", leaving no room under max_decoding_length (" +
            std::to_string(max_decoding_length) + ")");
  }
  if (score) {
    if (beam_size != 1) invalid("a score request decodes with beam_size 1, got " + std::to_string(beam_size));
    for (int id : score_target) {
      if (id < 0) invalid("targets has a negative token id " + std::to_string(id));
    }
    if (int(score_target.size()) + 1 + first > max_decoding_length) {
      invalid("targets has " + std::to_string(score_target.size()) + " tokens" +
              (first ? " (after the target language token)" : "") + " and </s>, more than max_decoding_length (" +
              std::to_string(max_decoding_length) + ")");
    }
  }
}

// A sampling sentence: beam 1 (beam search over samples is not defined here), its
// num_hypotheses are independent samples, each a cache row like a beam.
void DecodeOptions::validate_sampling(int max_beam) const {
  if (beam_size != 1)
    invalid("beam_size must be 1 when sampling (sampling_topk != 1 and sampling_temperature > 0), got " +
            std::to_string(beam_size) + ": num_hypotheses gives that many independent samples");
  if (num_hypotheses < 1 || num_hypotheses > max_beam)
    invalid("num_hypotheses (the samples) must be between 1 and " + std::to_string(max_beam) +
            " (each sample takes a cache row, as a beam), got " + std::to_string(num_hypotheses));
  // The draws keep no prompt or alignment bookkeeping (SentenceSearch::advance_sample): the
  // combinations are refused rather than answered without what they ask.
  if (!target_prefix.empty()) invalid("target_prefix cannot be combined with sampling");
  if (score) invalid("a score request cannot sample");
  if (return_alignments) invalid("return_alignments cannot be combined with sampling");
}

// Repetition controls: ranges as transformers' processors accept them (a positive n-gram size,
// a positive penalty), ids inside the target vocabulary, bounded lists (every beam's step
// matches every sequence against its history on the host).
void DecodeOptions::validate_repetition(int target_vocab_size, int eos_id) const {
  if (no_repeat_ngram_size < 0 || no_repeat_ngram_size > kMaxNoRepeatNgramSize)
    invalid("no_repeat_ngram_size must be between 0 (off) and " + std::to_string(kMaxNoRepeatNgramSize) +
            ", got " + std::to_string(no_repeat_ngram_size));
  if (!std::isfinite(repetition_penalty) || !(repetition_penalty > 0.f))
    invalid("repetition_penalty must be a finite number above 0 (1: off), got " + std::to_string(repetition_penalty));
  if (suppress_sequences.size() > size_t(kMaxSuppressSequences))
    invalid("suppress_sequences holds " + std::to_string(suppress_sequences.size()) + " sequences; at most " +
            std::to_string(kMaxSuppressSequences) + " are accepted");
  for (size_t i = 0; i < suppress_sequences.size(); ++i) {
    const std::vector<int>& seq = suppress_sequences[i];
    const std::string which = "suppress_sequences[" + std::to_string(i) + "]";
    if (seq.empty()) invalid(which + " is empty (a sequence needs at least one token)");
    if (seq.size() > size_t(kMaxSuppressSequenceTokens))
      invalid(which + " has " + std::to_string(seq.size()) + " tokens; at most " +
              std::to_string(kMaxSuppressSequenceTokens) + " are accepted");
    for (int id : seq) {
      if (id < 0 || id >= target_vocab_size)
        invalid(which + " holds token id " + std::to_string(id) + ", outside the target vocabulary (0.." +
                std::to_string(target_vocab_size - 1) + ")");
    }
    if (seq.size() == 1 && seq[0] == eos_id)
      invalid(which + " is the end-of-sentence token alone: no hypothesis could end");
  }
}

}  // namespace nmt
