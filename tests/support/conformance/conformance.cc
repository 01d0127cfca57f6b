#include "tests/support/conformance/conformance.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/decoding/decode_loop.h"

namespace nmt::test {
namespace {

std::string ids_str(const std::vector<int>& ids) {
  std::ostringstream o;
  for (size_t i = 0; i < ids.size(); ++i) o << (i ? " " : "") << ids[i];
  return o.str();
}

const std::vector<GoldenHypothesis>& wanted(const GoldenSentence& g, Search s, std::vector<GoldenHypothesis>* one) {
  if (s == Search::kFourBest) return g.nbest4;
  one->assign(1, s == Search::kGreedy ? g.greedy : g.beam4);
  return *one;
}

}  // namespace

const char* search_name(Search s) {
  switch (s) {
    case Search::kGreedy: return "greedy";
    case Search::kBeam4: return "beam4";
    case Search::kFourBest: return "nbest4";
  }
  return "?";
}

DecodeOptions search_options(Search s, int max_decoding_length) {
  DecodeOptions o;
  o.beam_size = s == Search::kGreedy ? 1 : 4;
  o.num_hypotheses = s == Search::kFourBest ? 4 : 1;
  o.max_decoding_length = max_decoding_length;
  return o;
}

int reference_max_decoding_length(const std::string& references_path) {
  const auto meta = std::filesystem::path(references_path).parent_path() / "meta.json";
  std::ifstream in(meta);
  if (!in) return 255;
  const auto j = nlohmann::json::parse(in);
  if (j.contains("max_decoding_length") && j["max_decoding_length"].is_number_integer()) {
    return j["max_decoding_length"].get<int>();
  }
  // generate()'s max_length counts the decoder start token.
  const auto greedy = j.value("generate", nlohmann::json::object()).value("greedy", nlohmann::json::object());
  if (greedy.contains("max_length") && greedy["max_length"].is_number_integer()) return greedy["max_length"].get<int>() - 1;
  return 255;
}

Comparison compare(const Decoder& decoder, const std::vector<GoldenSentence>& refs, Search search, int batch_size,
                   int max_decoding_length, const std::vector<int>& forced_bos) {
  Comparison c;
  for (size_t b = 0; b < refs.size(); b += size_t(batch_size)) {
    const size_t end = std::min(refs.size(), b + size_t(batch_size));
    std::vector<std::vector<int>> ids;
    std::vector<DecodeOptions> options;
    for (size_t i = b; i < end; ++i) {
      ids.push_back(refs[i].source_ids);
      options.push_back(search_options(search, max_decoding_length));
      if (!forced_bos.empty()) options.back().forced_bos_id = forced_bos.at(i);
    }
    const std::vector<Translation> got = decoder.decode(ids, options);
    for (size_t i = b; i < end; ++i) {
      std::vector<GoldenHypothesis> one;
      const auto& want = wanted(refs[i], search, &one);
      const auto& have = got[i - b].hypotheses;
      ++c.sentences;
      const int eos = decoder.eos_id;
      bool well_formed = have.size() == want.size();
      for (size_t h = 0; well_formed && h < have.size(); ++h) {
        well_formed = !have[h].ids.empty() && have[h].ids.back() == eos &&
                      int(have[h].ids.size()) <= max_decoding_length && (h == 0 || have[h].score <= have[h - 1].score);
      }
      if (!well_formed && c.malformed++ == 0) {
        c.first_malformed = std::string(search_name(search)) + " sentence " + std::to_string(refs[i].id) +
                            ": not a well-formed list of " + std::to_string(want.size()) + " hypotheses";
      }
      bool same = have.size() == want.size();
      for (size_t h = 0; same && h < want.size(); ++h) same = have[h].ids == want[h].ids;
      if (!same) {
        c.differing.push_back(refs[i].id);
        if (c.first_difference.empty()) {
          std::ostringstream o;
          o << search_name(search) << " sentence " << refs[i].id << " (" << refs[i].source << "):";
          for (size_t h = 0; h < std::max(have.size(), want.size()); ++h) {
            o << "\n  hypothesis " << h << " transformers [" << (h < want.size() ? ids_str(want[h].ids) : "none")
              << "]\n  hypothesis " << h << " engine       [" << (h < have.size() ? ids_str(have[h].ids) : "none") << "]";
          }
          c.first_difference = o.str();
        }
        continue;
      }
      ++c.identical;
      bool texts = true;
      for (size_t h = 0; h < want.size(); ++h) {
        if (decoder.with_texts && have[h].text != want[h].text && texts && c.texts_differ == 0) {
          c.first_text_difference = "sentence " + std::to_string(refs[i].id) + ": engine '" + have[h].text +
                                    "', transformers '" + want[h].text + "'";
        }
        texts = texts && (!decoder.with_texts || have[h].text == want[h].text);
        // The Multi30k file records no greedy score.
        if (search == Search::kGreedy && !refs[i].greedy_scored) continue;
        const double err = std::fabs(double(have[h].score) - want[h].score) / std::max(1.0, std::fabs(double(want[h].score)));
        c.worst_score_error = std::max(c.worst_score_error, err);
      }
      c.texts_differ += !texts;
    }
  }
  return c;
}

Comparison compare(Translator& translator, const std::vector<GoldenSentence>& refs, Search search,
                   int batch_size, int max_decoding_length) {
  Decoder d;
  d.decode = [&](const std::vector<std::vector<int>>& ids, const std::vector<DecodeOptions>& options) {
    return translator.translate_ids(ids, options.at(0));  // one search for the batch
  };
  d.eos_id = translator.config().eos_id;
  return compare(d, refs, search, batch_size, max_decoding_length);
}

std::vector<Translation> decode_ids(Engine& engine, const ModelConfig& config,
                                    const std::vector<std::vector<int>>& sources,
                                    const std::vector<DecodeOptions>& options) {
  int longest = 0, rows = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    longest = std::max(longest, int(sources[i].size()));
    rows += options.at(i).rows();  // beams or samples
  }
  DecodeLoop loop(engine, config, {int(sources.size()), rows, longest});
  std::vector<LoopSentence> admitted;
  for (size_t i = 0; i < sources.size(); ++i) admitted.push_back({uint64_t(i), sources[i], options[i]});
  loop.admit(std::move(admitted));
  std::vector<Translation> out(sources.size());
  while (!loop.idle()) {
    for (FinishedSentence& f : loop.step().finished) out.at(f.id) = std::move(f.translation);
  }
  return out;
}

std::vector<int> target_language_ids(const std::string& references_path, const std::vector<GoldenSentence>& refs) {
  const auto meta_path = std::filesystem::path(references_path).parent_path() / "meta.json";
  std::ifstream in(meta_path);
  if (!in) throw std::runtime_error("cannot open " + meta_path.string());
  const auto meta = nlohmann::json::parse(in);
  const auto languages = meta.value("tokenizer", nlohmann::json::object()).value("languages", nlohmann::json::object());
  std::vector<int> ids;
  for (const GoldenSentence& g : refs) {
    if (!languages.contains(g.target_language) || !languages[g.target_language].is_number_integer()) {
      throw std::runtime_error(meta_path.string() + ": tokenizer.languages has no id for target language '" +
                               g.target_language + "' (reference " + std::to_string(g.id) + ")");
    }
    ids.push_back(languages[g.target_language].get<int>());
  }
  return ids;
}

}  // namespace nmt::test
