#pragma once
// Per-request decoding options and their validation.
#include <cstdint>
#include <string>
#include <vector>

namespace nmt {

struct DecodeOptions {
  int beam_size = 4;           // 1 = greedy
  int num_hypotheses = 1;      // n-best, <= beam_size
  float length_penalty = 1.0f;  // score = sum(log p) / generated_length ** length_penalty
  // Most target tokens generated, EOS included; EOS is forced at this length. 255 matches
  // transformers' max_length 256, which also counts the decoder start token.
  int max_decoding_length = 255;
  int min_decoding_length = 0;  // EOS is masked until this many tokens precede it
  bool return_scores = false;
  // >= 0: the first generated token is this id (transformers' ForcedBOSTokenLogitsProcessor:
  // its log-prob is 0, every other token's -inf), counted in the length like any other.
  // The Translator sets it from the requested target language; -1: the model's default
  // (ModelConfig::forced_bos_id: none for Marian, generation_config's for the others).
  int forced_bos_id = -1;

  // return_alignments: the best hypothesis comes with the source token each target token
  // aligns to (Hypothesis::alignments; docs/decoding.md, "Alignments").
  bool return_alignments = false;
  // Repetition controls (docs/decoding.md, "Repetition controls"): transformers'
  // NoRepeatNGram-, RepetitionPenalty- and NoBadWordsLogitsProcessor over each beam's tokens,
  // the decoder start token first (transformers' decoder input_ids). A sentence with any of
  // them set steps from its host state (SentenceSearch::host_steps()).
  int no_repeat_ngram_size = 0;    // > 0: no n-gram of this many tokens occurs twice in a beam
  float repetition_penalty = 1.f;  // != 1: a token the beam holds scores s < 0 ? s * p : s / p
  std::vector<std::vector<int>> suppress_sequences;  // token ids; none is ever produced whole
  bool repetition_controls() const {
    return no_repeat_ngram_size > 0 || repetition_penalty != 1.f || !suppress_sequences.empty();
  }

  // target_prefix (docs/decoding.md, "Target prefix"): target ids the hypotheses continue,
  // after the forced first token when there is one. They are fed as forced tokens one step
  // at a time; as transformers' decoder_input_ids they (and the forced first token with them)
  // are the prompt: their log-probs are not in the score and the length normalisation counts
  // only the tokens generated after them, while max_decoding_length counts them. Returned
  // hypotheses include them. No EOS among them.
  std::vector<int> target_prefix;
  // Score (teacher forcing, docs/decoding.md "Score"): when set, the sentence is not searched
  // but scored: its target ids (EOS appended by the search) are forced one step at a time
  // with their real log-probs (StepGroup::teacher_forced), after the forced first token as
  // a translation has it. Greedy (beam_size 1); the score is normalised as a hypothesis'.
  std::vector<int> score_target;
  bool score = false;

  // Sampling (docs/decoding.md, "Sampling"; CTranslate2's names and defaults): a sentence
  // samples when sampling_topk != 1 and sampling_temperature > 0, with beam_size 1; its
  // num_hypotheses are that many independent samples (one cache row each). The warpers are
  // transformers' (temperature, then top-k, then top-p), applied to the masked logits.
  int sampling_topk = 1;             // 1: greedy; 0: the whole vocabulary; k: the k likeliest (ties kept)
  float sampling_topp = 1.f;         // (0, 1]: the likeliest tokens until their probability reaches it
  float sampling_temperature = 1.f;  // >= 0, finite; 0: greedy
  // The sampler's key (with the hypothesis and the step: model/decoding/controls/sampler.h): a seeded
  // sentence's samples depend on nothing else. Unseeded: each sentence draws one.
  bool has_seed = false;
  uint64_t seed = 0;
  bool samples() const { return sampling_topk != 1 && sampling_temperature > 0.f; }
  // Glossary (docs/decoding.md, "Glossary"): this sentence's required target phrases (the
  // target terms, as target token ids, of the glossary entries whose source term occurs in
  // it). Non-empty: constrained beam search from the host (SentenceSearch::host_steps()),
  // every hypothesis holds each phrase, EOS only once all are in. Empty: plain beam search.
  std::vector<std::vector<int>> glossary_phrases;
  bool constrained() const { return !glossary_phrases.empty(); }
  static constexpr int kMaxGlossaryPhrases = 64;  // PhraseConstraints::kMaxPhrases
  void validate_glossary() const;  // validate()'s part for a constrained sentence: the two below
  void validate_glossary_use() const;      // the other options it cannot be combined with
  void validate_glossary_phrases() const;  // the phrases: count, ids, length

  // Cache rows (beams or samples) a sentence takes in the decode loop.
  int rows() const { return samples() ? num_hypotheses : beam_size; }

  // Throws nmt::Error(kInvalidArgument) naming the option when a value is out of range.
  // max_beam and max_length are the serving limits (the model's position table bounds
  // max_length too).
  void validate(int max_beam, int max_length) const;
  // The repetition controls' checks against the target vocabulary (ids) and limits (the
  // constants below); throws like validate(). eos_id: a sequence of EOS alone is refused
  // (it would never let a hypothesis end).
  static constexpr int kMaxNoRepeatNgramSize = 32;
  static constexpr int kMaxSuppressSequences = 256;
  static constexpr int kMaxSuppressSequenceTokens = 32;
  void validate_repetition(int target_vocab_size, int eos_id) const;
  void validate_prompt() const;  // target_prefix / score (part of validate())
  void validate_sampling(int max_beam) const;  // validate()'s part for a sentence that samples
};

}  // namespace nmt
