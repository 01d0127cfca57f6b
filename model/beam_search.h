#pragma once
// Host-side decoding that reproduces transformers' generate(): greedy search for beam 1 and
// the vectorized beam search (with its early-stop heuristic, early_stopping=False) otherwise.
// The engine does the per-step math; this file only keeps hypotheses.
#include <vector>

#include "model/decode_options.h"
#include "model/engine.h"
#include "model/model_config.h"
#include "model/translator.h"

namespace nmt {

struct DecodeResult {
  std::vector<std::vector<int>> ids;  // best first, num_hypotheses of them; EOS included
  std::vector<float> scores;
  bool cancelled = false;
};

// Decodes the sentences that `engine` has just encoded (in that order).
std::vector<DecodeResult> decode(Engine& engine, size_t sentences, const ModelConfig& config,
                                 const DecodeOptions& options, const CancelFn& cancelled,
                                 BatchStats* stats);

}  // namespace nmt
