// nmt-bench-e2e: translation throughput and latency of the engines.
//
//   nmt-bench-e2e --model DIR --source FILE [--device cuda] [--precision float16]
//                 [--batches 1,64,128] [--beam 4] [--repeat 3]
//     Translates every line of FILE (already tokenized to ids outside the timing, sorted by
//     length, cut in batches) through nmt::Translator::translate_ids. Batch 1 reports latency
//     percentiles per sentence; larger batches report target tokens per second (best of
//     --repeat passes after one warm-up pass).
//
//   nmt-bench-e2e --ids-model DIR [--precision float16] [--batches 1,64] [--src-len 27]
//                 [--tgt-len 32] [--sentences 256]
//     For models without a tokenizer (e.g. a random-weight Transformer-base written by
//     run_e2e.sh): random source ids, exactly tgt-len decode steps per sentence
//     (min_decoding_length = tgt-len - 1, max_decoding_length = tgt-len), through the engine
//     and the host beam search directly (a decode loop holding one batch).
//
//   Both: --no-repeat-ngram-size N / --repetition-penalty X set the repetition controls on
//   every sentence (bench/e2e/engine/repetition_step.sh: the decode step with and without).
//   Both: --follow-rows N sets the decode loops' follow_rows (two steps in flight, each following
//   the one before, from N cache rows on; 0: never), so one binary measures both ways in the
//   same run. --trace FILE writes the kernels' launch timeline (builds configured with
//   -DNMT_CUDA_TRACE=ON; bench/e2e/engine/trace_summary.py reads it).
//
// Every measurement is also printed as one JSON line starting with "RESULT ".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/stream.h"
#if NMT_WITH_CUDA
#include "kernels/trace.h"
#endif
#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/decoding/decode_loop.h"
#include "model/error.h"
#include "model/translator.h"

using namespace nmt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model, source, ids_model;
  Device device = Device::kCuda;
  Precision precision = Precision::kFloat16;
  int follow_rows = -1;  // DecodeLoop::set_follow_rows; -1: the loop's default
  std::vector<int> batches{1, 64, 128};
  int beam = 4, repeat = 3, src_len = 27, tgt_len = 32, sentences = 256, latency_sentences = 0;
  std::string trace;    // --trace FILE: the kernels' launch timeline (builds with NMT_CUDA_TRACE)
  // Repetition controls on every sentence (DecodeOptions; 0 / 1: off).
  int no_repeat_ngram_size = 0;
  float repetition_penalty = 1.f;
};

// The repetition controls of the run, and their JSON fields.
void set_controls(const Args& a, DecodeOptions* d) {
  d->no_repeat_ngram_size = a.no_repeat_ngram_size;
  d->repetition_penalty = a.repetition_penalty;
}
std::string controls_json(const Args& a) {
  std::ostringstream js;
  js << ",\"no_repeat_ngram_size\":" << a.no_repeat_ngram_size << ",\"repetition_penalty\":" << a.repetition_penalty;
  return js.str();
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size())))];
}

// Device memory in use on the whole GPU (as nvidia-smi shows it, all processes), in MiB.
long device_used_mib() {
#if NMT_WITH_CUDA
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return long((total_b - free_b) >> 20);
#else
  return -1;
#endif
}

void report(const std::string& json) { std::cout << "RESULT " << json << std::endl; }

// Batches of `batch` ids, longest first (as a server batches by length).
std::vector<std::vector<std::vector<int>>> make_batches(std::vector<std::vector<int>> ids, int batch) {
  std::stable_sort(ids.begin(), ids.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<std::vector<std::vector<int>>> out;
  for (size_t i = 0; i < ids.size(); i += size_t(batch))
    out.emplace_back(ids.begin() + long(i), ids.begin() + long(std::min(ids.size(), i + size_t(batch))));
  return out;
}

// Runs `translate` over the batches `passes` times; returns the best pass's seconds and tokens.
template <typename Fn>
std::pair<double, long> best_pass(const std::vector<std::vector<std::vector<int>>>& batches,
                                  int passes, Fn translate) {
  double best = 1e30;
  long tokens = 0;
  for (int p = 0; p < passes; ++p) {
    long tok = 0;
    const auto t0 = Clock::now();
    for (const auto& b : batches) tok += translate(b);
    best = std::min(best, seconds_since(t0));
    tokens = tok;
  }
  return {best, tokens};
}

int run_text(const Args& a) {
  TranslatorOptions o;
  o.device = a.device;
  o.precision = a.precision;
  o.follow_rows = a.follow_rows;
  auto tr = Translator::load(a.model, o);
  std::vector<std::vector<int>> ids;
  std::ifstream in(a.source);
  if (!in) throw Error(ErrorCode::kNotFound, "cannot open " + a.source);
  for (std::string line; std::getline(in, line);) ids.push_back(tr->tokenizer().encode(line));
  DecodeOptions d;
  d.beam_size = a.beam;
  set_controls(a, &d);
  auto translate = [&](const std::vector<std::vector<int>>& b) {
    long tok = 0;
    for (const auto& t : tr->translate_ids(b, d)) tok += long(t.hypotheses[0].ids.size());
    return tok;
  };
  for (int batch : a.batches) {
    std::ostringstream js;
    js << "{\"model\":\"" << a.model << "\",\"engine\":\"nmt-serve\",\"device\":\"" << device_name(tr->device())
       << "\",\"precision\":\"" << precision_name(a.precision) << "\",\"beam\":" << a.beam
       << ",\"batch\":" << batch << controls_json(a) << ",\"follow_rows\":" << a.follow_rows << ",\"graphs\":" << (std::getenv("NMT_CUDA_GRAPHS") ? std::getenv("NMT_CUDA_GRAPHS") : "1");
    if (batch == 1) {
      const size_t n = a.latency_sentences > 0 ? std::min(ids.size(), size_t(a.latency_sentences)) : ids.size();
      for (size_t i = 0; i < std::min<size_t>(n, 50); ++i) translate({ids[i]});  // warm-up
      std::vector<double> ms;
      long tokens = 0;
      const auto t_all = Clock::now();
      for (size_t i = 0; i < n; ++i) {
        const auto t0 = Clock::now();
        tokens += translate({ids[i]});
        ms.push_back(seconds_since(t0) * 1e3);
      }
      const double total = seconds_since(t_all);
      js << ",\"sentences\":" << n << ",\"p50_ms\":" << percentile(ms, 50) << ",\"p90_ms\":" << percentile(ms, 90)
         << ",\"p99_ms\":" << percentile(ms, 99) << ",\"tokens_per_s\":" << tokens / total;
    } else {
      const auto batches = make_batches(ids, batch);
      best_pass(batches, 1, translate);  // warm-up: buffers, cuBLAS heuristics, graphs
      const auto [secs, tokens] = best_pass(batches, a.repeat, translate);
      js << ",\"sentences\":" << ids.size() << ",\"seconds\":" << secs << ",\"target_tokens\":" << tokens
         << ",\"tokens_per_s\":" << tokens / secs << ",\"sentences_per_s\":" << ids.size() / secs;
    }
    js << ",\"engine_mib\":" << (tr->device_memory_used() >> 20) << ",\"gpu_used_mib\":" << device_used_mib() << "}";
    report(js.str());
  }
  return 0;
}

int run_ids(const Args& a) {
  const ModelConfig config = ModelConfig::load(a.ids_model);
  std::unique_ptr<Engine> engine;
  {
    const Weights w = Weights::load(a.ids_model, config);
    TranslatorOptions o;
    o.device = a.device;
    o.precision = a.precision;
    engine = a.device == Device::kCpu ? nullptr : make_cuda_engine(config, w, o);
    if (!engine) throw Error(ErrorCode::kInvalidArgument, "--ids-model runs on cuda only");
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> tok(1, config.vocab_size - 1);
  std::vector<std::vector<int>> ids(size_t(a.sentences));
  for (auto& s : ids) {
    for (int i = 0; i + 1 < a.src_len; ++i) {
      int t = tok(rng);
      while (t == config.pad_id || t == config.eos_id) t = tok(rng);
      s.push_back(t);
    }
    s.push_back(config.eos_id);
  }
  DecodeOptions d;
  d.beam_size = a.beam;
  set_controls(a, &d);
  d.max_decoding_length = a.tgt_len;
  d.min_decoding_length = a.tgt_len - 1;
  int steps = 0;
  // Engine memory (issue 52): as loaded, the most while a pass decodes, and what it holds a
  // moment after its batches drained and once the engine gave back what it retains
  // (CudaEngine::kRetain: a release of nothing after that long lets it).
  const size_t loaded = engine->memory_used();
  size_t peak = 0;
  auto translate = [&](const std::vector<std::vector<int>>& b) {
    const int n = int(b.size());
    DecodeLoop loop(*engine, config, {n, n * a.beam, a.src_len});
    if (a.follow_rows >= 0) loop.set_follow_rows(a.follow_rows);
    std::vector<LoopSentence> sentences;
    for (int i = 0; i < n; ++i) sentences.push_back({uint64_t(i), b[size_t(i)], d});
    loop.admit(std::move(sentences));
    long tok = 0;
    for (steps = 0; !loop.idle();) {  // steps: decoder positions (the longest sentence's)
      for (const FinishedSentence& f : loop.step().finished) {
        tok += long(f.translation.hypotheses[0].ids.size());
        steps = std::max(steps, f.steps);
      }
      peak = std::max(peak, engine->memory_used());
    }
    return tok;
  };
  for (int batch : a.batches) {
    const auto batches = make_batches(std::vector<std::vector<int>>(ids.begin(), ids.begin() + std::min<long>(long(ids.size()), batch == 1 ? 20 : long(ids.size()))), batch);
    best_pass(batches, 1, translate);
    peak = 0;
    const auto [secs, tokens] = best_pass(batches, a.repeat, translate);
    const size_t drained = engine->memory_used();
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    engine->release(0, {});
    const size_t returned = engine->memory_used();
    const double per_sentence_ms = secs * 1e3 / double(batches.size());
    std::ostringstream js;
    js << "{\"model\":\"" << a.ids_model << "\",\"engine\":\"nmt-serve\",\"precision\":\""
       << precision_name(a.precision) << "\",\"beam\":" << a.beam << ",\"batch\":" << batch << controls_json(a)
       << ",\"follow_rows\":" << a.follow_rows << ",\"src_len\":" << a.src_len << ",\"tgt_len\":" << a.tgt_len << ",\"steps\":" << steps
       << ",\"seconds\":" << secs << ",\"target_tokens\":" << tokens << ",\"tokens_per_s\":" << tokens / secs
       << ",\"ms_per_batch\":" << per_sentence_ms << ",\"ms_per_step\":" << per_sentence_ms / std::max(steps, 1)
       << ",\"engine_mib\":" << (drained >> 20) << ",\"engine_loaded_mib\":" << (loaded >> 20)
       << ",\"engine_peak_mib\":" << (peak >> 20) << ",\"engine_returned_mib\":" << (returned >> 20)
       << ",\"gpu_used_mib\":" << device_used_mib() << "}";
    report(js.str());
  }
  return 0;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(std::stoi(x));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::cerr << k << " needs a value\n"; std::exit(2); }
      return argv[++i];
    };
    if (k == "--model") a.model = next();
    else if (k == "--source") a.source = next();
    else if (k == "--ids-model") a.ids_model = next();
    else if (k == "--device") { if (!parse_device(next(), &a.device)) { std::cerr << "bad --device\n"; return 2; } }
    else if (k == "--precision") { if (!parse_precision(next(), &a.precision)) { std::cerr << "bad --precision\n"; return 2; } }
    else if (k == "--batches") a.batches = parse_list(next());
    else if (k == "--beam") a.beam = std::stoi(next());
    else if (k == "--repeat") a.repeat = std::stoi(next());
    else if (k == "--src-len") a.src_len = std::stoi(next());
    else if (k == "--tgt-len") a.tgt_len = std::stoi(next());
    else if (k == "--sentences") a.sentences = std::stoi(next());
    else if (k == "--latency-sentences") a.latency_sentences = std::stoi(next());
    else if (k == "--trace") a.trace = next();
    else if (k == "--follow-rows") a.follow_rows = std::stoi(next());
    else if (k == "--no-repeat-ngram-size") a.no_repeat_ngram_size = std::stoi(next());
    else if (k == "--repetition-penalty") a.repetition_penalty = std::stof(next());
    else { std::cerr << "unknown option " << k << "\n"; return 2; }
  }
  try {
    if (a.ids_model.empty() && (a.model.empty() || a.source.empty())) { std::cerr << "need --model and --source, or --ids-model\n"; return 2; }
#if NMT_WITH_CUDA
    if (!a.trace.empty() && !nmt::kernels::trace_recorded()) { std::cerr << "--trace needs a build configured with -DNMT_CUDA_TRACE=ON\n"; return 2; }
#else
    if (!a.trace.empty()) { std::cerr << "--trace needs a CUDA build\n"; return 2; }
#endif
    const int rc = a.ids_model.empty() ? run_text(a) : run_ids(a);
#if NMT_WITH_CUDA
    if (rc == 0 && !a.trace.empty()) nmt::kernels::trace_dump(a.trace);
#endif
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "nmt-bench-e2e: " << e.what() << "\n";
    return 1;
  }
}
