// nmt-translate: texts from stdin (or --input FILE), one a line, one translation per line on
// stdout, in input order. Each line is split into sentences (model/text/, as the server's
// split_sentences) and its translations joined with the line's own whitespace, since the
// models stop at the end of a sentence; --no-split-sentences translates each line whole.
// Progress and timing go to stderr; errors exit non-zero with one line.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/error.h"
#include "model/text/glossary.h"
#include "model/text/sentence_splitter.h"
#include "model/tokenizer/languages.h"
#include "model/translator.h"

namespace {

constexpr const char* kUsage =
    "usage: nmt-translate [--model DIR] [--device auto|cpu|cuda] [--precision float16|float32|int8|fp8]\n"
    "                     [--beam N] [--batch-size N] [--num-hypotheses N] [--length-penalty X]\n"
    "                     [--max-length N] [--min-length N] [--scores] [--input FILE] [--quiet]\n"
    "                     [--threads N]   (CPU: cores per decode step, default all)\n"
    "                     [--source-language L] [--target-language L]\n"
    "                     (multilingual models: deu_Latn, de, de_DE, ...; default: the model's)\n"
    "                     [--no-split-sentences] [--alignments]\n"
    "                     [--no-split-sentences]\n"
    "                     [--no-repeat-ngram-size N] [--repetition-penalty X]\n"
    "                     [--suppress-sequence TEXT]... [--suppress-token-id ID]...\n"
    "                     (repetition controls: docs/decoding.md)\n"
    "                     [--target-prefix TEXT]  (every translation continues TEXT; one sentence a line)\n"
    "                     [--score]  (lines 'SOURCE ||| TARGET': prints 'SCORE ||| TARGET', the model's\n"
    "                                 normalised log-prob of TARGET, as a translation's score)\n"
    "                     [--glossary FILE] [--ignore-model-glossary]  (lines 'SOURCE<TAB>TARGET': where\n"
    "                     SOURCE occurs (whole words, case-sensitive) the translation holds TARGET; the\n"
    "                     model folder's glossary.tsv applies too; docs/decoding.md, \"Glossary\")\n"
    "                     [--sampling-topk K] [--sampling-topp P] [--sampling-temperature T] [--seed N]\n"
    "                     (K 0: the whole vocabulary, 1: greedy (default); sampling: beam 1,\n"
    "                     --num-hypotheses independent samples; docs/decoding.md)\n"
    "Reads one text per line, splits it into sentences (ICU) and prints one translation per\n"
    "line in input order; --no-split-sentences translates each line as one sentence.\n"
    "With --num-hypotheses > 1 each input gives N lines 'INDEX ||| TEXT ||| SCORE';\n"
    "with --scores a single-best line is 'SCORE ||| TEXT' (both: one sentence a line);\n"
    "with --alignments 'TEXT ||| S-T ...': source-target token index pairs (Pharaoh format).\n";

struct Args {
  std::string model = NMT_DEFAULT_MODEL_DIR;
  std::string input;
  nmt::TranslatorOptions translator;
  nmt::DecodeOptions decode;
  nmt::LanguagePair languages;
  int batch_size = 32;
  bool quiet = false;
  bool split_sentences = true;
  std::vector<std::string> suppress_texts;  // repetition controls: tokenized as targets once loaded
  std::string target_prefix;  // DecodeOptions::target_prefix, as text
  bool score = false;         // Translator::score on 'SOURCE ||| TARGET' lines
  bool beam_set = false;  // --beam given (sampling's beam is 1 otherwise)
  std::string glossary;  // --glossary FILE (model/text/glossary.h's format)
  bool ignore_model_glossary = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "nmt-translate: " << msg << "\n" << kUsage;
  std::exit(2);
}

int to_int(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const int n = std::stoi(v, &pos);
    if (pos == v.size()) return n;
  } catch (const std::exception&) {
  }
  usage_error(flag + " expects an integer, got '" + v + "'");
}

float to_float(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const float x = std::stof(v, &pos);
    if (pos == v.size()) return x;
  } catch (const std::exception&) {
  }
  usage_error(flag + " expects a number, got '" + v + "'");
}

Args parse(int argc, char** argv) {
  Args a;
  a.decode.num_hypotheses = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (f == "--scores") { a.decode.return_scores = true; continue; }
    if (f == "--alignments") { a.decode.return_alignments = true; continue; }
    if (f == "--quiet") { a.quiet = true; continue; }
    if (f == "--no-split-sentences") { a.split_sentences = false; continue; }
    if (f == "--score") { a.score = true; continue; }
    if (f == "--ignore-model-glossary") { a.ignore_model_glossary = true; continue; }
    if (i + 1 >= argc) usage_error("missing value for " + f);
    const std::string v = argv[++i];
    if (f == "--model") a.model = v;
    else if (f == "--input") a.input = v;
    else if (f == "--source-language") a.languages.source = v;
    else if (f == "--target-language") a.languages.target = v;
    else if (f == "--target-prefix") a.target_prefix = v;
    else if (f == "--glossary") a.glossary = v;
    else if (f == "--device") { if (!nmt::parse_device(v, &a.translator.device)) usage_error("--device must be auto, cpu or cuda"); }
    else if (f == "--precision") { if (!nmt::parse_precision(v, &a.translator.precision)) usage_error("--precision must be float16, float32, int8 or fp8"); }
    else if (f == "--beam") { a.decode.beam_size = to_int(f, v); a.beam_set = true; }
    else if (f == "--batch-size") a.batch_size = to_int(f, v);
    else if (f == "--threads") a.translator.threads = to_int(f, v);
    else if (f == "--num-hypotheses") a.decode.num_hypotheses = to_int(f, v);
    else if (f == "--max-length") a.decode.max_decoding_length = to_int(f, v);
    else if (f == "--min-length") a.decode.min_decoding_length = to_int(f, v);
    else if (f == "--no-repeat-ngram-size") a.decode.no_repeat_ngram_size = to_int(f, v);
    else if (f == "--suppress-sequence") a.suppress_texts.push_back(v);
    else if (f == "--suppress-token-id") a.decode.suppress_sequences.push_back({to_int(f, v)});
    else if (f == "--repetition-penalty") {
      try { a.decode.repetition_penalty = std::stof(v); } catch (const std::exception&) { usage_error("--repetition-penalty expects a number"); }
    }
    else if (f == "--sampling-topk") a.decode.sampling_topk = to_int(f, v);
    else if (f == "--sampling-topp") a.decode.sampling_topp = to_float(f, v);
    else if (f == "--sampling-temperature") a.decode.sampling_temperature = to_float(f, v);
    else if (f == "--seed") {
      try {
        size_t pos = 0;
        a.decode.seed = std::stoull(v, &pos);
        if (pos != v.size() || v.front() == '-') throw std::invalid_argument(v);
      } catch (const std::exception&) { usage_error("--seed expects an unsigned integer, got '" + v + "'"); }
      a.decode.has_seed = true;
    } else if (f == "--length-penalty") {
      try { a.decode.length_penalty = std::stof(v); } catch (const std::exception&) { usage_error("--length-penalty expects a number"); }
    } else usage_error("unknown option " + f);
  }
  if (a.decode.samples() && !a.beam_set) a.decode.beam_size = 1;
  if (a.batch_size < 1) usage_error("--batch-size must be at least 1");
  if (a.translator.threads < 0) usage_error("--threads must be 0 (all cores) or more");
  return a;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  if (!path.empty()) {
    file.open(path);
    if (!file) throw nmt::Error(nmt::ErrorCode::kNotFound, path + ": cannot open input file");
  }
  std::istream& in = path.empty() ? std::cin : file;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// The sentences of each line (one per line without splitting), in order, and how to put a
// line back together.
struct Sentences {
  std::vector<std::string> all;
  std::vector<nmt::SplitText> lines;  // with splitting: each line's sentences and whitespace
};

Sentences split_lines(const std::vector<std::string>& lines, const Args& args,
                      const nmt::Translator& translator) {
  Sentences out;
  if (!args.split_sentences) {
    out.all = lines;
    return out;
  }
  // The source language's sentence rules (its abbreviations): the requested one, else the
  // model's own (ICU's root rules when neither is known).
  const std::string source = translator.resolve_source(args.languages.source);
  const nmt::LanguageInfo info = nmt::describe_language(source);
  const nmt::SentenceSplitter& splitter =
      nmt::SentenceSplitter::for_language(!info.iso639_1.empty() ? info.iso639_1 : info.iso639_3);
  const bool one_each = args.decode.num_hypotheses > 1 || args.decode.return_scores || args.decode.return_alignments ||
                        !args.target_prefix.empty();
  for (size_t i = 0; i < lines.size(); ++i) {
    out.lines.push_back(splitter.split(lines[i]));
    const auto& sentences = out.lines.back().sentences;
    if (one_each && sentences.size() != 1) {
      throw nmt::Error(nmt::ErrorCode::kInvalidArgument,
                       "input line " + std::to_string(i + 1) + " has " + std::to_string(sentences.size()) +
                           " sentences: --num-hypotheses, --scores, --alignments and --target-prefix take one sentence; put "
                           "one sentence a line or pass --no-split-sentences");
    }
    out.all.insert(out.all.end(), sentences.begin(), sentences.end());
  }
  return out;
}

// The model folder's glossary.tsv (unless --ignore-model-glossary), then --glossary's entries.
std::vector<nmt::GlossaryEntry> load_glossaries(const Args& args) {
  std::vector<nmt::GlossaryEntry> out;
  const std::string model_glossary = args.model + "/glossary.tsv";
  std::vector<std::string> files;
  if (!args.ignore_model_glossary && std::ifstream(model_glossary).good()) files.push_back(model_glossary);
  if (!args.glossary.empty()) files.push_back(args.glossary);
  for (const std::string& file : files) {
    try {
      for (nmt::GlossaryEntry& e : nmt::load_glossary_file(file)) out.push_back(std::move(e));
    } catch (const std::runtime_error& e) {
      throw nmt::Error(nmt::ErrorCode::kInvalidArgument, std::string("--glossary: ") + e.what());
    }
  }
  return out;
}

// Per sentence, the target terms (target ids) of the entries whose source it holds; empty when
// none applies to any (every sentence takes plain beam search).
std::vector<std::vector<std::vector<int>>> glossary_phrases(const std::vector<nmt::GlossaryEntry>& glossary,
                                                            const std::vector<std::string>& sentences,
                                                            const nmt::Translator& translator) {
  std::vector<std::vector<std::vector<int>>> out(sentences.size());
  bool any = false;
  for (size_t s = 0; s < sentences.size(); ++s) {
    for (size_t i : nmt::glossary_matches(glossary, sentences[s])) {
      std::vector<int> ids = translator.encode_target(glossary[i].target);
      if (ids.empty())
        throw nmt::Error(nmt::ErrorCode::kInvalidArgument, "--glossary: the target term '" + glossary[i].target + "' has no tokens");
      if (std::find(out[s].begin(), out[s].end(), ids) == out[s].end()) out[s].push_back(std::move(ids));
      any = true;
    }
  }
  if (!any) out.clear();
  return out;
}

// --score: one 'SOURCE ||| TARGET' pair a line, 'SCORE ||| TARGET' out.
void score_lines(const std::vector<std::string>& lines, const Args& args, nmt::Translator& translator) {
  std::vector<std::string> sources, targets;
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t bar = lines[i].find(" ||| ");
    if (bar == std::string::npos)
      throw nmt::Error(nmt::ErrorCode::kInvalidArgument,
                       "input line " + std::to_string(i + 1) + ": --score reads 'SOURCE ||| TARGET'");
    sources.push_back(lines[i].substr(0, bar));
    targets.push_back(lines[i].substr(bar + 5));
  }
  for (size_t b = 0; b < lines.size(); b += size_t(args.batch_size)) {
    const size_t end = std::min(lines.size(), b + size_t(args.batch_size));
    const std::vector<nmt::Hypothesis> scored =
        translator.score({sources.begin() + long(b), sources.begin() + long(end)},
                         {targets.begin() + long(b), targets.begin() + long(end)}, args.decode, nullptr, args.languages);
    for (size_t i = 0; i < scored.size(); ++i) std::cout << scored[i].score << " ||| " << targets[b + i] << "\n";
  }
  std::cout.flush();
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  const bool scores_flag = args.decode.return_scores;
  try {
    args.decode.validate(1 << 10, 1 << 20);
    auto translator = nmt::Translator::load(args.model, args.translator);
    for (const std::string& text : args.suppress_texts) {  // repetition controls
      std::vector<int> ids = translator->tokenizer().encode_target(text);
      if (ids.empty()) throw nmt::Error(nmt::ErrorCode::kInvalidArgument, "--suppress-sequence '" + text + "' has no tokens");
      args.decode.suppress_sequences.push_back(std::move(ids));
    }
    args.decode.validate_repetition(translator->config().target_vocab_size, translator->config().eos_id);
    const std::vector<std::string> lines = read_lines(args.input);
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].empty()) {
        throw nmt::Error(nmt::ErrorCode::kInvalidArgument, "input line " + std::to_string(i + 1) + " is empty");
      }
    }
    if (args.score) {
      score_lines(lines, args, *translator);
      return 0;
    }
    if (!args.target_prefix.empty()) args.decode.target_prefix = translator->encode_target(args.target_prefix);
    const Sentences sentences = split_lines(lines, args, *translator);
    const std::vector<nmt::GlossaryEntry> glossary = load_glossaries(args);
    const auto start = std::chrono::steady_clock::now();
    nmt::BatchStats stats;
    const std::vector<std::string>& todo = sentences.all;
    const bool progress = !args.quiet && todo.size() >= size_t(args.batch_size) * 4;
    std::vector<nmt::Translation> results;
    results.reserve(todo.size());
    for (size_t b = 0; b < todo.size(); b += size_t(args.batch_size)) {
      const size_t end = std::min(todo.size(), b + size_t(args.batch_size));
      const std::vector<std::string> batch(todo.begin() + long(b), todo.begin() + long(end));
      const auto phrases = glossary_phrases(glossary, batch, *translator);
      for (auto& t : translator->translate(batch, args.decode, &stats, args.languages, phrases))
        results.push_back(std::move(t));
      if (progress) std::cerr << "\rtranslated " << end << "/" << todo.size() << std::flush;
    }
    size_t next = 0;  // into results, a line's sentences after the line before's
    for (size_t i = 0; i < lines.size(); ++i) {
      if (!sentences.lines.empty() && args.decode.num_hypotheses == 1 && !scores_flag &&
          !args.decode.return_alignments) {
        std::vector<std::string> best;
        for (size_t k = 0; k < sentences.lines[i].sentences.size(); ++k) best.push_back(results[next++].hypotheses.at(0).text);
        std::cout << sentences.lines[i].join(best) << "\n";
        continue;
      }
      for (const auto& h : results[next++].hypotheses) {
        if (args.decode.num_hypotheses > 1) {
          std::cout << i << " ||| " << h.text << " ||| " << h.score << "\n";
        } else if (scores_flag) {
          std::cout << h.score << " ||| " << h.text << "\n";
        } else if (args.decode.return_alignments) {
          std::cout << h.text << " |||";
          for (const nmt::TokenAlignment& a : h.alignments) std::cout << " " << a.source_token << "-" << a.target_token;
          std::cout << "\n";
        } else {
          std::cout << h.text << "\n";
        }
      }
    }
    std::cout.flush();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!args.quiet) {
      std::cerr << (progress ? "\n" : "") << "nmt-translate: " << lines.size() << " lines, "
                << todo.size() << " sentences, "
                << stats.output_tokens << " target tokens in " << secs << " s on "
                << nmt::device_name(translator->device()) << " ("
                << (secs > 0 ? todo.size() / secs : 0) << " sentences/s, "
                << (secs > 0 ? stats.output_tokens / secs : 0) << " target tokens/s)\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "nmt-translate: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
