#include "tests/support/conformance/repetition_cases.h"

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tests/support/conformance/conformance.h"
#include "tests/support/golden.h"

namespace nmt::test {
namespace {

std::string ids_text(const std::vector<int>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

RepetitionCase parse_case(const nlohmann::json& j) {
  RepetitionCase c;
  c.model = j.at("model").get<std::string>();
  c.model_dir = repo_root() + "/" + j.at("model_dir").get<std::string>();
  c.id = j.at("id").get<int>();
  c.search = j.at("search").get<std::string>();
  c.source_ids = j.at("source_ids").get<std::vector<int>>();
  c.ids = j.at("ids").get<std::vector<int>>();
  c.plain_ids = j.at("plain_ids").get<std::vector<int>>();
  DecodeOptions& o = c.options;
  o.beam_size = j.at("beam_size").get<int>();
  o.num_hypotheses = 1;
  o.max_decoding_length = j.at("max_decoding_length").get<int>();
  o.forced_bos_id = j.at("forced_bos_id").get<int>();
  const nlohmann::json& controls = j.at("controls");
  o.no_repeat_ngram_size = controls.value("no_repeat_ngram_size", 0);
  o.repetition_penalty = controls.value("repetition_penalty", 1.f);
  o.suppress_sequences = controls.value("suppress_sequences", std::vector<std::vector<int>>{});
  return c;
}

}  // namespace

std::string RepetitionCase::describe() const {
  std::ostringstream s;
  s << model << " id " << id << " " << search << " ngram " << options.no_repeat_ngram_size << " penalty "
    << options.repetition_penalty << " suppress " << options.suppress_sequences.size();
  return s.str();
}

std::string repetition_references_path() { return conformance_dir() + "/controls/repetition/references.jsonl"; }

std::vector<RepetitionCase> load_repetition_cases() {
  std::ifstream in(repetition_references_path());
  std::vector<RepetitionCase> out;
  if (!in) return out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(parse_case(nlohmann::json::parse(line)));
    } catch (const std::exception& e) {
      throw std::runtime_error(repetition_references_path() + " line " + std::to_string(n) + ": " + e.what());
    }
  }
  return out;
}

RepetitionReport check_repetition_cases(const std::vector<RepetitionCase>& cases, const EngineFactory& make) {
  RepetitionReport r;
  std::map<std::string, std::vector<const RepetitionCase*>> by_model;
  for (const RepetitionCase& c : cases) by_model[c.model_dir].push_back(&c);
  for (const auto& [dir, model_cases] : by_model) {
    const ModelConfig config = ModelConfig::load(dir);
    std::unique_ptr<Engine> engine = make(config, dir);
    // One loop: every case with its controls, then each source again with no control.
    std::vector<std::vector<int>> sources;
    std::vector<DecodeOptions> options;
    for (const RepetitionCase* c : model_cases) {
      sources.push_back(c->source_ids);
      options.push_back(c->options);
    }
    for (const RepetitionCase* c : model_cases) {
      DecodeOptions plain = c->options;
      plain.no_repeat_ngram_size = 0;
      plain.repetition_penalty = 1.f;
      plain.suppress_sequences.clear();
      sources.push_back(c->source_ids);
      options.push_back(plain);
    }
    const std::vector<Translation> mixed = decode_ids(*engine, config, sources, options);
    const size_t n = model_cases.size();
    for (size_t i = 0; i < n; ++i) {
      const RepetitionCase& c = *model_cases[i];
      ++r.cases;
      r.changed += c.ids != c.plain_ids;
      const std::vector<int>& got = mixed[i].hypotheses.at(0).ids;
      if (got == c.ids) {
        ++r.matched;
      } else {
        r.failures.push_back(c.describe() + ": transformers " + ids_text(c.ids) + ", ours " + ids_text(got));
      }
      if (mixed[n + i].hypotheses.at(0).ids != c.plain_ids) {
        ++r.plain_differs;
        r.failures.push_back(c.describe() + ": without controls, beside controlled sentences: transformers " +
                             ids_text(c.plain_ids) + ", ours " + ids_text(mixed[n + i].hypotheses.at(0).ids));
      }
      const std::vector<Translation> lone = decode_ids(*engine, config, {c.source_ids}, {c.options});
      if (lone.at(0).hypotheses.at(0).ids != got) {
        ++r.lone_differs;
        r.failures.push_back(c.describe() + ": alone " + ids_text(lone.at(0).hypotheses.at(0).ids) +
                             ", in the mixed loop " + ids_text(got));
      }
    }
  }
  return r;
}

}  // namespace nmt::test
