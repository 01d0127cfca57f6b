#pragma once
// Translating a references file (tests/support/golden.h) with a Translator and counting how
// much of it comes out identical: the conformance tests on the CPU and on the GPU share it.
#include <string>
#include <vector>

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

// Translates every reference's source_ids in batches of batch_size and compares.
Comparison compare(Translator& translator, const std::vector<GoldenSentence>& refs, Search search,
                   int batch_size, int max_decoding_length);

}  // namespace nmt::test
