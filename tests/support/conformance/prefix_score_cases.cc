#include "tests/support/conformance/prefix_score_cases.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/decoding/decode_loop.h"
#include "tests/support/golden.h"

namespace nmt::test {
namespace {

template <typename T>
std::vector<T> list(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? j.at(key).get<std::vector<T>>() : std::vector<T>{};
}

double relative(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

std::string show(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return "[" + s + "]";
}

}  // namespace

std::string prefix_score_references_path() {
  return conformance_dir() + "/controls/prefix_score/references.jsonl";
}

std::vector<PrefixScoreCase> load_prefix_score_cases() {
  std::ifstream in(prefix_score_references_path());
  if (!in) throw std::runtime_error("cannot read " + prefix_score_references_path());
  std::vector<PrefixScoreCase> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    PrefixScoreCase c;
    c.model = j.at("model").get<std::string>();
    c.model_dir = repo_root() + "/" + j.at("model_dir").get<std::string>();
    c.kind = j.at("kind").get<std::string>();
    c.id = j.at("id").get<int>();
    c.max_decoding_length = j.at("max_decoding_length").get<int>();
    c.forced_bos_id = j.at("forced_bos_id").get<int>();
    c.source_ids = list<int>(j, "source_ids");
    if (c.kind == "prefix") {
      c.target_prefix = list<int>(j, "target_prefix");
      c.greedy_ids = list<int>(j.at("greedy"), "ids");
      c.greedy_score = j.at("greedy").at("score").get<double>();
      c.greedy_token_scores = list<double>(j.at("greedy"), "token_scores");
      c.beam4_ids = list<int>(j.at("beam4"), "ids");
      c.beam4_score = j.at("beam4").at("score").get<double>();
    } else if (c.kind == "score") {
      c.target = list<int>(j, "target");
      c.ids = list<int>(j, "ids");
      c.token_scores = list<double>(j, "token_scores");
      c.score = j.at("score").get<double>();
      if (j.contains("translation_score") && !j.at("translation_score").is_null()) {
        c.has_translation_score = true;
        c.translation_score = j.at("translation_score").get<double>();
      }
    } else {
      throw std::runtime_error(prefix_score_references_path() + ": unknown kind " + c.kind);
    }
    out.push_back(std::move(c));
  }
  return out;
}

PrefixScoreComparison compare_prefix_score(Translator& translator, const std::vector<PrefixScoreCase>& cases) {
  // Sentence 3 i is case i's greedy run, 3 i + 1 its beam 4, 3 i + 2 its score.
  std::vector<LoopSentence> sentences;
  int rows = 0;
  size_t longest = 1;
  for (size_t i = 0; i < cases.size(); ++i) {
    const PrefixScoreCase& c = cases[i];
    DecodeOptions o;
    o.max_decoding_length = c.max_decoding_length;
    o.forced_bos_id = c.forced_bos_id;
    longest = std::max(longest, c.source_ids.size());
    if (c.kind == "prefix") {
      o.target_prefix = c.target_prefix;
      o.beam_size = 1;
      sentences.push_back({3 * i, c.source_ids, o});
      o.beam_size = 4;
      sentences.push_back({3 * i + 1, c.source_ids, o});
      rows += 5;
    } else {
      o.beam_size = 1;
      o.score = true;
      o.score_target = c.target;
      sentences.push_back({3 * i + 2, c.source_ids, o});
      rows += 1;
    }
  }
  PrefixScoreComparison r;
  auto loop = translator.make_loop({int(sentences.size()), rows, int(longest)});
  loop->admit(sentences);
  std::map<uint64_t, Hypothesis> got;
  while (!loop->idle()) {
    for (FinishedSentence& f : loop->step().finished) got[f.id] = f.translation.hypotheses.at(0);
  }
  auto note = [&](const PrefixScoreCase& c, const std::string& what, double got, double want) {
    const double e = relative(got, want);
    if (e <= r.worst_score_error) return;
    r.worst_score_error = e;
    r.worst_where = c.model + " id " + std::to_string(c.id) + " " + what + ": " + std::to_string(got) +
                    ", transformers " + std::to_string(want);
  };
  auto check = [&](const PrefixScoreCase& c, const char* what, const Hypothesis& h, const std::vector<int>& ids,
                   double score) {
    ++r.cases;
    if (h.ids == ids) {
      ++r.identical;
      note(c, what, h.score, score);
    } else if (r.first_difference.empty()) {
      r.first_difference = c.model + " id " + std::to_string(c.id) + " " + what + ": got " + show(h.ids) +
                           ", transformers " + show(ids);
    }
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const PrefixScoreCase& c = cases[i];
    if (c.kind == "prefix") {
      check(c, "prefix greedy", got.at(3 * i), c.greedy_ids, c.greedy_score);
      check(c, "prefix beam4", got.at(3 * i + 1), c.beam4_ids, c.beam4_score);
      continue;
    }
    const Hypothesis& h = got.at(3 * i + 2);
    check(c, "score", h, c.ids, c.score);
    if (h.token_scores.size() != c.token_scores.size()) {
      if (r.first_difference.empty()) r.first_difference = c.model + " id " + std::to_string(c.id) + ": token_scores size";
      continue;
    }
    for (size_t t = 0; t < h.token_scores.size(); ++t)
      note(c, "token " + std::to_string(t), h.token_scores[t], c.token_scores[t]);
    if (c.has_translation_score) note(c, "score of the own best", h.score, c.translation_score);
  }
  return r;
}

}  // namespace nmt::test
