#pragma once
// return_alignments against transformers' cross-attention alignments
// (tests/conformance/controls/alignments, written by tools/conformance/controls/alignments.py):
// each record's greedy and beam-4 best hypothesis translated with return_alignments on the
// given device in float32, its ids and per-token argmax source positions compared. The CPU
// test (tests/model/conformance/test_alignments.cc) and the GPU one (tests/engine/controls/test_alignments_cuda.cc)
// share it.
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "model/translator.h"
#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"

namespace nmt::test {

// An argmax whose best and second-best head-averaged probabilities are this close is a tie:
// float32 summation orders differ between the engines and torch by about 1e-7 relative.
constexpr double kAlignmentTieGap = 1e-6;

struct AlignmentTally {
  int hypotheses = 0;
  int ids_differ = 0;    // hypotheses whose ids are not transformers' (their alignments not compared)
  int tokens = 0;        // alignments compared
  int identical = 0;
  int ties = 0;          // differing within kAlignmentTieGap
  int differ = 0;        // differing beyond it
  std::string first_difference;
};

inline std::string alignment_references_dir() { return conformance_dir() + "/controls/alignments"; }

inline AlignmentTally compare_alignments(Device device) {
  AlignmentTally t;
  const std::string dir = alignment_references_dir();
  const nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir + "/meta.json"));
  std::map<std::string, std::unique_ptr<Translator>> models;
  std::map<std::string, int> max_length;
  std::ifstream in(dir + "/references.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json rec = nlohmann::json::parse(line);
    const std::string name = rec.at("model");
    if (!models.count(name)) {
      const nlohmann::json& m = meta.at("models").at(name);
      TranslatorOptions o;
      o.device = device;
      o.precision = Precision::kFloat32;
      models[name] = Translator::load(repo_root() + "/" + m.at("folder").get<std::string>(), o);
      max_length[name] = reference_max_decoding_length(repo_root() + "/" + m.at("references").get<std::string>());
    }
    for (const char* mode : {"greedy", "beam4"}) {
      const nlohmann::json& ref = rec.at(mode);
      DecodeOptions opt = search_options(std::string(mode) == "greedy" ? Search::kGreedy : Search::kBeam4,
                                         max_length[name]);
      opt.return_alignments = true;
      const std::vector<int> want_ids = ref.at("ids").get<std::vector<int>>();
      if (rec.contains("target_language")) opt.forced_bos_id = want_ids.at(0);
      const Translation out =
          models[name]->translate_ids({rec.at("source_ids").get<std::vector<int>>()}, opt).at(0);
      const Hypothesis& h = out.hypotheses.at(0);
      ++t.hypotheses;
      if (h.ids != want_ids) {
        ++t.ids_differ;
        if (t.first_difference.empty())
          t.first_difference = name + " id " + std::to_string(rec.at("id").get<int>()) + " " + mode + ": ids differ";
        continue;
      }
      const std::vector<int> want = ref.at("alignments").get<std::vector<int>>();
      const std::vector<double> gaps = ref.at("gaps").get<std::vector<double>>();
      if (h.alignments.size() != want.size()) {
        ++t.differ;
        if (t.first_difference.empty())
          t.first_difference = name + " id " + std::to_string(rec.at("id").get<int>()) + " " + mode + ": " +
                               std::to_string(h.alignments.size()) + " alignments for " +
                               std::to_string(want.size()) + " tokens";
        continue;
      }
      for (size_t i = 0; i < want.size(); ++i) {
        ++t.tokens;
        if (h.alignments[i].target_token != int(i)) ++t.differ;
        if (h.alignments[i].source_token == want[i]) {
          ++t.identical;
        } else if (gaps[i] <= kAlignmentTieGap) {
          ++t.ties;
        } else {
          ++t.differ;
          if (t.first_difference.empty())
            t.first_difference = name + " id " + std::to_string(rec.at("id").get<int>()) + " " + mode + " token " +
                                 std::to_string(i) + ": source " + std::to_string(h.alignments[i].source_token) +
                                 ", transformers' " + std::to_string(want[i]) + " (gap " +
                                 std::to_string(gaps[i]) + ")";
        }
      }
    }
  }
  std::printf("alignments: %d hypotheses (%d with other ids), %d tokens: %d identical, %d exact ties, %d differ\n",
              t.hypotheses, t.ids_differ, t.tokens, t.identical, t.ties, t.differ);
  return t;
}

}  // namespace nmt::test
