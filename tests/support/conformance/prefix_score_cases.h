#pragma once
// The target_prefix and Score references (tests/conformance/controls/prefix_score, made by
// tools/conformance/controls/prefix_score.py with transformers) and their comparison on an
// engine: every case of a model in one decode loop (prefix greedy, prefix beam 4 and scores
// sharing steps), ids identical, scores within kScoreTolerance.
#include <string>
#include <vector>

#include "model/translator.h"

namespace nmt::test {

struct PrefixScoreCase {
  std::string model, model_dir, kind;  // kind: "prefix" | "score"
  int id = 0;
  int max_decoding_length = 255;
  int forced_bos_id = -1;
  std::vector<int> source_ids;
  std::vector<int> target_prefix;            // prefix
  std::vector<int> greedy_ids, beam4_ids;    // prefix: hypotheses, language token and prefix included
  double greedy_score = 0, beam4_score = 0;
  std::vector<double> greedy_token_scores;
  std::vector<int> target, ids;              // score: the target, and the ids scored
  std::vector<double> token_scores;
  double score = 0;
  bool has_translation_score = false;        // score of the model's own beam-4 best:
  double translation_score = 0;              // that hypothesis' score
};

std::string prefix_score_references_path();  // tests/conformance/controls/prefix_score/references.jsonl
// Throws std::runtime_error when the file is missing or malformed.
std::vector<PrefixScoreCase> load_prefix_score_cases();

struct PrefixScoreComparison {
  int cases = 0, identical = 0;     // hypotheses / scored ids identical
  double worst_score_error = 0;     // relative, as kScoreTolerance
  std::string worst_where;          // the case and value of the worst error
  std::string first_difference;
};

// Every case of one model through one decode loop of `translator` (greedy and beam 4 of each
// prefix case, and each score case).
PrefixScoreComparison compare_prefix_score(Translator& translator, const std::vector<PrefixScoreCase>& cases);

}  // namespace nmt::test
