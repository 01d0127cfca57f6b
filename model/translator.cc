#include "model/translator.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "model/beam_search.h"
#include "model/cpu_engine.h"
#include "model/cuda_engine.h"
#include "model/error.h"
#include "model/weights.h"

namespace nmt {

bool parse_device(const std::string& s, Device* out) {
  if (s == "auto") *out = Device::kAuto;
  else if (s == "cpu") *out = Device::kCpu;
  else if (s == "cuda") *out = Device::kCuda;
  else return false;
  return true;
}

bool parse_precision(const std::string& s, Precision* out) {
  if (s == "float32") *out = Precision::kFloat32;
  else if (s == "float16") *out = Precision::kFloat16;
  else return false;
  return true;
}

const char* device_name(Device d) {
  switch (d) {
    case Device::kAuto: return "auto";
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "?";
}

bool cuda_available() { return cuda_device_count() > 0; }

size_t cpu_batch_memory_bytes(const ModelConfig& c, const std::vector<std::vector<int>>& source_ids,
                              const DecodeOptions& options) {
  size_t src_len = 0;
  for (const auto& s : source_ids) src_len = std::max(src_len, s.size());
  const size_t d = size_t(c.d_model), ffn = size_t(std::max(c.encoder_ffn_dim, c.decoder_ffn_dim));
  const size_t enc_rows = source_ids.size() * src_len;
  const size_t rows = source_ids.size() * size_t(options.beam_size);
  // The cache doubles its capacity past each power of two: at most 2 x (length + 1).
  const size_t capacity = std::max<size_t>(16, 2 * (size_t(options.max_decoding_length) + 1));
  const size_t layers = size_t(c.decoder_layers);
  const size_t floats = enc_rows * (7 * d + ffn) +            // encoder activations and output
                        2 * layers * enc_rows * d +            // cross-attention K/V
                        (2 * layers + 1) * rows * capacity * d +  // self-attention cache + reorder copy
                        rows * (7 * d + ffn) +                 // decoder step activations
                        rows * size_t(c.vocab_size);           // logits
  return floats * sizeof(float);
}

Translator::~Translator() = default;

std::unique_ptr<Translator> Translator::load(const std::string& model_dir,
                                             const TranslatorOptions& options) {
  std::unique_ptr<Translator> t(new Translator());
  t->config_ = ModelConfig::load(model_dir);
  t->tokenizer_ = Tokenizer::load(model_dir, t->config_);
  t->device_ = options.device == Device::kAuto ? (cuda_available() ? Device::kCuda : Device::kCpu)
                                               : options.device;
  // The engines keep pointers into the host weights (the CPU engine computes from them).
  t->weights_ = std::make_unique<Weights>(Weights::load(model_dir, t->config_));
  t->engine_ = t->device_ == Device::kCuda ? make_cuda_engine(t->config_, *t->weights_, options)
                                           : make_cpu_engine(t->config_, *t->weights_);
  if (t->device_ == Device::kCuda) t->weights_.reset();  // uploaded: the host copy is not needed
  if (t->device_ == Device::kCpu) t->cpu_batch_memory_limit_ = options.device_memory_limit;
  return t;
}

const ModelConfig& Translator::config() const { return config_; }
const Tokenizer& Translator::tokenizer() const { return *tokenizer_; }
size_t Translator::device_memory_used() const { return engine_->memory_used(); }

std::vector<Translation> Translator::translate(const std::vector<std::string>& sources,
                                               const DecodeOptions& options, BatchStats* stats,
                                               const CancelFn& cancelled) {
  std::vector<std::vector<int>> ids;
  ids.reserve(sources.size());
  for (const auto& s : sources) ids.push_back(tokenizer_->encode(s));
  return translate_ids(ids, options, stats, cancelled);
}

std::vector<Translation> Translator::translate_ids(const std::vector<std::vector<int>>& source_ids,
                                                   const DecodeOptions& options, BatchStats* stats,
                                                   const CancelFn& cancelled) {
  options.validate(1 << 10, config_.max_positions);
  if (source_ids.empty()) return {};
  for (const auto& s : source_ids) {
    if (s.empty()) throw Error(ErrorCode::kInvalidArgument, "empty source sentence (no tokens)");
    if (int(s.size()) > config_.max_positions) {
      throw Error(ErrorCode::kInvalidArgument,
                  "source sentence has " + std::to_string(s.size()) + " tokens; the model accepts at most " +
                      std::to_string(config_.max_positions));
    }
  }
  if (cpu_batch_memory_limit_ > 0) {
    const size_t need = cpu_batch_memory_bytes(config_, source_ids, options);
    if (need > cpu_batch_memory_limit_) {
      throw Error(ErrorCode::kResourceExhausted,
                  "out of memory: this batch needs about " + std::to_string(need >> 20) +
                      " MiB of working memory, over the limit of " +
                      std::to_string(cpu_batch_memory_limit_ >> 20) + " MiB");
    }
  }
  // Longest first: similar lengths share padding, and the engine sees a stable order.
  std::vector<size_t> order(source_ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return source_ids[a].size() > source_ids[b].size(); });
  std::vector<std::vector<int>> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(source_ids[i]);
  CancelFn sorted_cancel;
  if (cancelled) sorted_cancel = [&](size_t i) { return cancelled(order[i]); };

  BatchStats local;
  BatchStats& st = stats ? *stats : local;
  for (const auto& s : sorted) st.input_tokens += int64_t(s.size());
  const auto t0 = std::chrono::steady_clock::now();
  engine_->encode(sorted, options.beam_size);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<DecodeResult> decoded = decode(*engine_, sorted.size(), config_, options, sorted_cancel, &st);
  const auto t2 = std::chrono::steady_clock::now();
  st.encode_seconds += std::chrono::duration<double>(t1 - t0).count();
  st.decode_seconds += std::chrono::duration<double>(t2 - t1).count();

  std::vector<Translation> out(source_ids.size());
  for (size_t i = 0; i < order.size(); ++i) {
    Translation& tr = out[order[i]];
    tr.cancelled = decoded[i].cancelled;
    for (size_t h = 0; h < decoded[i].ids.size(); ++h) {
      tr.hypotheses.push_back({decoded[i].ids[h], tokenizer_->decode(decoded[i].ids[h]), decoded[i].scores[h]});
    }
  }
  return out;
}

}  // namespace nmt
