#pragma once
// Translating a references file (tests/support/golden.h) with a Translator and counting how
// much of it comes out identical: the conformance tests on the CPU and on the GPU share it.
#include <functional>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/engine.h"
#include "model/translator.h"
#include "tests/support/golden.h"

namespace nmt::test {

// The three searches each references file holds: greedy, beam 4, beam 4 returning 4 best.
enum class Search { kGreedy, kBeam4, kFourBest };
const char* search_name(Search s);
DecodeOptions search_options(Search s, int max_decoding_length);

// The generated-token limit transformers' generate() ran with, from the meta.json beside the
// references ("max_decoding_length", else generate's greedy max_length - 1, which counts the
// decoder start token); 255 (max_length 256) without a meta.json saying either.
int reference_max_decoding_length(const std::string& references_path);

struct Comparison {
  int sentences = 0;
  int identical = 0;          // sentences whose ids (all 4 lists for kFourBest) are identical
  int texts_differ = 0;       // of the identical ones, those whose detokenized text differs
  double worst_score_error = 0;  // |ours - theirs| / max(1, |theirs|) over identical hypotheses
  std::string first_difference;  // a readable account of the first sentence that differs
  std::vector<int> differing;    // ids of the sentences that differ
  std::string first_text_difference;
  // Sentences whose hypotheses are not a well-formed n-best list: the wrong count, a hypothesis
  // not ending in </s> or longer than the limit, scores not best first.
  int malformed = 0;
  std::string first_malformed;
};

// What is compared: a batch of sources, each with its options, to their hypotheses; eos_id
// ends every hypothesis; with_texts: the hypotheses carry their detokenized texts (compared
// with the references') or not (an engine driven without a tokenizer).
struct Decoder {
  std::function<std::vector<Translation>(const std::vector<std::vector<int>>&, const std::vector<DecodeOptions>&)>
      decode;
  int eos_id = 0;
  bool with_texts = true;
};

// Translates every reference's source_ids in batches of batch_size and compares. forced_bos:
// per reference, the first target token its options force (DecodeOptions::forced_bos_id),
// empty: none.
Comparison compare(const Decoder& decoder, const std::vector<GoldenSentence>& refs, Search search, int batch_size,
                   int max_decoding_length, const std::vector<int>& forced_bos = {});
// The Translator's translate_ids (one options for the batch), texts included.
Comparison compare(Translator& translator, const std::vector<GoldenSentence>& refs, Search search,
                   int batch_size, int max_decoding_length);

// The sources decoded through one DecodeLoop on `engine`, each with its own options, as the
// server batches the sentences of different requests (different target languages share the
// decode steps). Hypotheses carry ids and scores, no texts.
std::vector<Translation> decode_ids(Engine& engine, const ModelConfig& config,
                                    const std::vector<std::vector<int>>& sources,
                                    const std::vector<DecodeOptions>& options);

// The model families' references (tests/conformance/families/<variant>): the id of each
// reference's target-language token, which its decode forces first: from the meta.json
// beside the references (tokenizer.languages: code -> id). Throws std::runtime_error naming
// the file and the language when absent.
std::vector<int> target_language_ids(const std::string& references_path, const std::vector<GoldenSentence>& refs);

}  // namespace nmt::test
