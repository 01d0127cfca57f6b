#include "model/translator.h"

#include <algorithm>
#include <chrono>

#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/decoding/decode_loop.h"
#include "model/error.h"
#include "model/text_worker.h"
#include "model/tokenizer/languages.h"

namespace nmt {

namespace {
// The value of `values` whose name(value) is s.
template <typename E, size_t N>
bool parse_named(const std::string& s, const E (&values)[N], const char* (*name)(E), E* out) {
  for (E v : values) {
    if (s == name(v)) {
      *out = v;
      return true;
    }
  }
  return false;
}
}  // namespace

bool parse_device(const std::string& s, Device* out) { return parse_named(s, kDevices, device_name, out); }

bool parse_precision(const std::string& s, Precision* out) { return parse_named(s, kPrecisions, precision_name, out); }

const char* device_name(Device d) {
  switch (d) {
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFloat32: return "float32";
    case Precision::kFloat16: return "float16";
    case Precision::kInt8: return "int8";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

bool cuda_available() { return cuda_device_count() > 0; }

Translator::~Translator() = default;

std::unique_ptr<Translator> Translator::load(const std::string& model_dir,
                                             const TranslatorOptions& options) {
  std::unique_ptr<Translator> t(new Translator());
  t->config_ = ModelConfig::load(model_dir);
  t->tokenizer_ = Tokenizer::load(model_dir, t->config_);
  t->device_ = options.device == Device::kAuto ? (cuda_available() ? Device::kCuda : Device::kCpu)
                                               : options.device;
  if (t->device_ == Device::kCpu && options.precision == Precision::kFp8)
    throw Error(ErrorCode::kInvalidArgument, "precision fp8 runs on CUDA GPUs of compute capability 8.9 or newer "
                                             "only; on the CPU use precision int8");
  t->precision_ = t->device_ == Device::kCpu && options.precision == Precision::kFloat16 ? Precision::kFloat32
                                                                                        : options.precision;
  // The engines keep pointers into the host weights (the CPU engine computes from them).
  t->follow_rows_ = options.follow_rows;
  t->weights_ = std::make_unique<Weights>(Weights::load(model_dir, t->config_));
  t->engine_ = t->device_ == Device::kCuda ? make_cuda_engine(t->config_, *t->weights_, options)
                                           : make_cpu_engine(t->config_, *t->weights_, options.device_memory_limit,
                                                             options.threads, options.precision == Precision::kInt8);
  if (t->device_ == Device::kCuda) t->weights_.reset();  // uploaded: the host copy is not needed
  return t;
}

const ModelConfig& Translator::config() const { return config_; }
const Tokenizer& Translator::tokenizer() const { return *tokenizer_; }
size_t Translator::device_memory_used() const { return engine_->memory_used(); }
size_t Translator::memory_held() const {
  if (device_ == Device::kCuda) return engine_->memory_used();
  return (weights_ ? weights_->bytes() : 0) + engine_->host_memory_used();
}

std::unique_ptr<DecodeLoop> Translator::make_loop(const EngineCapacity& capacity) {
  auto loop = std::make_unique<DecodeLoop>(*engine_, config_, capacity);
  if (follow_rows_ >= 0) loop->set_follow_rows(follow_rows_);
  return loop;
}

namespace {

// A bilingual model's side: the request must name its language (where the model says which).
std::string resolve_bilingual(const std::string& requested, const std::string& own, const char* side) {
  if (requested.empty() || own.empty()) return requested;
  try {
    return resolve_language(requested, {own});
  } catch (const Error&) {
    throw Error(ErrorCode::kInvalidArgument, std::string(side) + "_language '" + requested +
                                                 "' is not this model's: its " + side + " language is " + own);
  }
}

}  // namespace

std::string Translator::resolve_source(const std::string& source) const {
  if (source.empty()) return "";
  if (tokenizer_->languages().empty()) return resolve_bilingual(source, tokenizer_->bilingual_source(), "source");
  try {
    return resolve_language(source, tokenizer_->languages());
  } catch (const Error& e) {
    throw Error(e.code(), std::string("source_language: ") + e.what());
  }
}

std::string Translator::resolve_target(const std::string& target) const {
  if (target.empty()) return "";
  if (tokenizer_->languages().empty()) return resolve_bilingual(target, tokenizer_->bilingual_target(), "target");
  try {
    return resolve_language(target, tokenizer_->languages());
  } catch (const Error& e) {
    throw Error(e.code(), std::string("target_language: ") + e.what());
  }
}

std::vector<int> Translator::encode_source(const std::string& text, const std::string& source) const {
  const std::string code = resolve_source(source);
  // A bilingual model's encode takes no language: its own was checked above.
  return tokenizer_->encode(text, tokenizer_->languages().empty() ? "" : code);
}

int Translator::target_token(const std::string& target) const {
  const std::string code = resolve_target(target);
  if (config_.arch.family == Family::kMarian) return -1;
  if (!code.empty()) return tokenizer_->language_token(code);
  if (config_.forced_bos_id >= 0) return config_.forced_bos_id;
  throw Error(ErrorCode::kInvalidArgument,
              "target_language is required: this model translates into several languages and names no default "
              "(no forced_bos_token_id in config.json / generation_config.json)");
}

void Translator::set_alignment_spans(const std::string& source, const std::string& source_language,
                                     Hypothesis* h) const {
  if (h->alignments.empty()) return;
  const std::string code = resolve_source(source_language);
  nmt::set_alignment_spans(*tokenizer_, source, tokenizer_->languages().empty() ? "" : code, h);
}

void set_alignment_spans(const Tokenizer& tokenizer, const std::string& source, const std::string& encode_language,
                         Hypothesis* h) {
  if (h->alignments.empty()) return;
  const std::vector<TextSpan> from = tokenizer.source_spans(source, encode_language);
  const std::vector<TextSpan> to = tokenizer.target_spans(h->ids, h->text);
  for (TokenAlignment& a : h->alignments) {
    if (a.source_token < 0 || size_t(a.source_token) >= from.size() || a.target_token < 0 ||
        size_t(a.target_token) >= to.size())
      throw Error(ErrorCode::kInternal, "alignments: a token index is outside the sentence's tokens");
    a.source_begin = from[size_t(a.source_token)].begin;
    a.source_end = from[size_t(a.source_token)].end;
    a.target_begin = to[size_t(a.target_token)].begin;
    a.target_end = to[size_t(a.target_token)].end;
  }
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& sources,
                                               const DecodeOptions& options, BatchStats* stats,
                                               const LanguagePair& languages,
                                               const std::vector<std::vector<std::vector<int>>>& glossary) {
  DecodeOptions with_target = options;
  // A caller that set the forced token itself keeps it unless it also names a target.
  if (!languages.target.empty() || options.forced_bos_id < 0) with_target.forced_bos_id = target_token(languages.target);
  std::vector<std::vector<int>> ids;
  ids.reserve(sources.size());
  for (const auto& s : sources) ids.push_back(encode_source(s, languages.source));
  if (!glossary.empty() && glossary.size() != sources.size())
    throw Error(ErrorCode::kInvalidArgument, "a glossary for " + std::to_string(glossary.size()) + " of " +
                                                 std::to_string(sources.size()) + " sentences");
  std::vector<DecodeOptions> each(sources.size(), with_target);
  for (size_t i = 0; i < glossary.size(); ++i) each[i].glossary_phrases = glossary[i];
  std::vector<Translation> out = translate_ids(ids, each, stats);
  if (options.return_alignments) {
    for (size_t i = 0; i < out.size(); ++i) {
      for (Hypothesis& h : out[i].hypotheses) set_alignment_spans(sources[i], languages.source, &h);
    }
  }
  return out;
}

std::vector<Translation> Translator::translate_ids(const std::vector<std::vector<int>>& source_ids,
                                                   const DecodeOptions& options, BatchStats* stats) {
  return translate_ids(source_ids, std::vector<DecodeOptions>(source_ids.size(), options), stats);
}

std::vector<Translation> Translator::translate_ids(const std::vector<std::vector<int>>& source_ids,
                                                   const std::vector<DecodeOptions>& each, BatchStats* stats) {
  if (each.size() != source_ids.size())
    throw Error(ErrorCode::kInvalidArgument, std::to_string(each.size()) + " decoding options for " +
                                                 std::to_string(source_ids.size()) + " sentences");
  for (const DecodeOptions& options : each) {
    options.validate(1 << 10, config_.max_positions);
    options.validate_repetition(config_.target_vocab_size, config_.eos_id);  // repetition controls
    check_target_ids(options.target_prefix, "target_prefix");
    for (const std::vector<int>& phrase : options.glossary_phrases) check_target_ids(phrase, "glossary");
  }
  return run(source_ids, each, stats);
}

void Translator::check_target_ids(const std::vector<int>& ids, const std::string& field) const {
  for (int id : ids) {
    if (id == config_.eos_id)
      throw Error(ErrorCode::kInvalidArgument, field + " holds </s> (id " + std::to_string(id) + "): it ends a hypothesis");
    if (id < 0 || id >= config_.target_vocab_size)
      throw Error(ErrorCode::kInvalidArgument, field + " holds id " + std::to_string(id) +
                                                   ", outside the target vocabulary of " +
                                                   std::to_string(config_.target_vocab_size));
  }
}

std::vector<Hypothesis> Translator::score(const std::vector<std::string>& sources,
                                          const std::vector<std::string>& targets, const DecodeOptions& options,
                                          BatchStats* stats, const LanguagePair& languages) {
  DecodeOptions with_target = options;
  if (!languages.target.empty() || options.forced_bos_id < 0) with_target.forced_bos_id = target_token(languages.target);
  std::vector<std::vector<int>> ids, target_ids;
  for (const auto& s : sources) ids.push_back(encode_source(s, languages.source));
  for (const auto& t : targets) target_ids.push_back(encode_target(t));
  return score_ids(ids, target_ids, with_target, stats);
}

std::vector<Hypothesis> Translator::score_ids(const std::vector<std::vector<int>>& source_ids,
                                              const std::vector<std::vector<int>>& target_ids,
                                              const DecodeOptions& options, BatchStats* stats) {
  if (source_ids.size() != target_ids.size())
    throw Error(ErrorCode::kInvalidArgument, "targets has " + std::to_string(target_ids.size()) +
                                                 " entries for " + std::to_string(source_ids.size()) + " sources");
  std::vector<DecodeOptions> each(source_ids.size(), options);
  for (size_t i = 0; i < each.size(); ++i) {
    each[i].beam_size = 1;
    each[i].num_hypotheses = 1;
    each[i].min_decoding_length = 0;
    each[i].score = true;
    each[i].score_target = target_ids[i];
    each[i].validate(1 << 10, config_.max_positions);
    check_target_ids(target_ids[i], "targets[" + std::to_string(i) + "]");
  }
  std::vector<Translation> t = run(source_ids, each, stats);
  std::vector<Hypothesis> out;
  out.reserve(t.size());
  for (Translation& x : t) out.push_back(std::move(x.hypotheses.at(0)));
  return out;
}

std::vector<Translation> Translator::run(const std::vector<std::vector<int>>& source_ids,
                                         const std::vector<DecodeOptions>& options, BatchStats* stats) {
  if (source_ids.empty()) return {};
  int longest = 0, rows = 0;
  for (size_t i = 0; i < source_ids.size(); ++i) {
    const auto& s = source_ids[i];
    if (s.empty()) throw Error(ErrorCode::kInvalidArgument, "empty source sentence (no tokens)");
    if (int(s.size()) > config_.max_positions) {
      throw Error(ErrorCode::kInvalidArgument,
                  "source sentence has " + std::to_string(s.size()) + " tokens; the model accepts at most " +
                      std::to_string(config_.max_positions));
    }
    longest = std::max(longest, int(s.size()));
    rows += options[i].rows();
  }
  const int n = int(source_ids.size());
  std::unique_ptr<DecodeLoop> loop = make_loop({n, rows, longest});

  BatchStats local;
  BatchStats& st = stats ? *stats : local;
  std::vector<LoopSentence> admitted;
  for (int i = 0; i < n; ++i) {
    admitted.push_back({uint64_t(i), source_ids[size_t(i)], options[size_t(i)]});
    st.input_tokens += int64_t(source_ids[size_t(i)].size());
  }
  const auto t0 = std::chrono::steady_clock::now();
  loop->admit(std::move(admitted));
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<Translation> out(source_ids.size());
  TextWorker texts(*tokenizer_);
  while (!loop->idle()) {
    for (FinishedSentence& f : loop->step().finished) {
      for (const Hypothesis& h : f.translation.hypotheses) st.output_tokens += int64_t(h.ids.size());
      st.decode_steps = std::max(st.decode_steps, f.steps);
      Translation& t = out[f.id];
      t = std::move(f.translation);
      // While steps are in flight the worker makes the texts; a sentence finishing an idle
      // loop (always so at batch 1) gets them here, without a thread hop.
      if (loop->idle() && !texts.started()) {
        for (Hypothesis& h : t.hypotheses) h.text = tokenizer_->decode(h.ids);
      } else {
        texts.add(&t);
      }
    }
  }
  texts.wait();
  st.encode_seconds += std::chrono::duration<double>(t1 - t0).count();
  st.decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  return out;
}

}  // namespace nmt
