#pragma once
// The repetition controls' references (tests/conformance/controls/repetition, written by
// tools/conformance/controls/repetition.py): one case per (model, sentence, search, controls)
// with transformers' ids. The CPU and GPU tests share the loading and the checks: each model's
// cases decoded in one decode loop (different controls, greedy and beam sharing the steps,
// beside sentences with no control), each equal to transformers' ids and to its lone decode.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/decode_options.h"
#include "model/decoding/engine.h"

namespace nmt::test {

struct RepetitionCase {
  std::string model, model_dir;  // model_dir: under the repository
  int id = 0;
  std::string search;             // "greedy" | "beam4"
  std::vector<int> source_ids;
  DecodeOptions options;          // the search, its max length, forced_bos_id and the controls
  std::vector<int> ids, plain_ids;  // transformers' with and without the controls
  std::string describe() const;
};

std::string repetition_references_path();
// Every case, in file order; throws std::runtime_error on a malformed file, empty if absent.
std::vector<RepetitionCase> load_repetition_cases();

// The checks of one model's cases on an engine made by `make` for (config, model_dir):
// appends a readable line per failure and returns how many cases matched transformers.
struct RepetitionReport {
  int cases = 0, matched = 0, changed = 0;  // changed: the controls changed transformers' ids
  int lone_differs = 0, plain_differs = 0;
  std::vector<std::string> failures;
};
// The factory keeps what its engine reads (the CPU engine computes from the host Weights).
using EngineFactory = std::function<std::unique_ptr<Engine>(const ModelConfig&, const std::string& model_dir)>;
RepetitionReport check_repetition_cases(const std::vector<RepetitionCase>& cases, const EngineFactory& make);

}  // namespace nmt::test
