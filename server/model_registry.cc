#include "server/model_registry.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "model/error.h"

namespace nmt::server {
namespace {

TranslatorOptions translator_options(const ModelEntry& entry) {
  TranslatorOptions options;
  if (!parse_device(entry.device, &options.device)) {
    throw Error(ErrorCode::kInvalidArgument, "unknown device '" + entry.device + "'");
  }
  if (!parse_precision(entry.precision, &options.precision)) {
    throw Error(ErrorCode::kInvalidArgument, "unknown precision '" + entry.precision + "'");
  }
  options.device_memory_limit = static_cast<size_t>(entry.device_memory_limit_mb) << 20;
  // Loops run at once: each takes its share of the cores rather than all of them each.
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  options.threads = entry.threads > 0 ? entry.threads : std::max(1, cores / std::max(1, entry.workers));
  return options;
}

}  // namespace

ModelRegistry::ModelRegistry(const ServerConfig& config, Metrics& metrics) : metrics_(metrics) {
  for (const ModelEntry& entry : config.models) {
    auto served = std::make_unique<ServedModel>();
    served->name = entry.name;
    served->precision = entry.precision;
    served->is_default = models_.empty();
    try {
      for (int w = 0; w < entry.workers; ++w) {
        served->translators.push_back(Translator::load(entry.path, translator_options(entry)));
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot load model '" + entry.name + "' from " + entry.path +
                               ": " + e.what());
    }
    const Translator& first = *served->translators.front();
    // The model's position table bounds source and target lengths; refuse limits beyond it
    // here rather than failing batches later.
    const int positions = first.config().max_positions;
    if (config.limits.max_input_tokens > positions ||
        config.limits.max_decoding_length > positions) {
      throw std::runtime_error(
          "model '" + entry.name + "' has " + std::to_string(positions) +
          " positions (max_position_embeddings): limits.max_input_tokens (" +
          std::to_string(config.limits.max_input_tokens) + ") and limits.max_decoding_length (" +
          std::to_string(config.limits.max_decoding_length) + ") must not exceed it");
    }
    served->device = device_name(first.device());
    if (first.device() == Device::kCpu) served->precision = "float32";  // always

    const std::string name = served->name, device = served->device;
    // Every slot holds the longest source a request may send.
    const EngineCapacity capacity{config.batching.max_active_sentences, config.batching.max_active_rows,
                                  config.limits.max_input_tokens};
    std::vector<DecodeLoop*> loops;
    try {
      for (auto& t : served->translators) {
        served->loops.push_back(t->make_loop(capacity, /*detokenize=*/false));
        loops.push_back(served->loops.back().get());
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot reserve the decode state of model '" + entry.name +
                               "' (batching.max_active_sentences, max_active_rows, limits.max_input_tokens): " +
                               e.what());
    }
    std::vector<Translator*> translators;
    for (auto& t : served->translators) translators.push_back(t.get());
    SchedulerHooks hooks;
    // Each loop reads its own engine's memory on its own thread (engines are not
    // thread-safe) and publishes it here; the gauge shows the model's sum.
    auto held = std::make_shared<std::vector<std::atomic<size_t>>>(translators.size());
    hooks.on_step = [&metrics, name, device, translators, held](int loop, int rows, int sentences,
                                                                int admitted, double step_seconds,
                                                                double encode_seconds) {
      metrics.loop_step(name, loop, rows, sentences, admitted, step_seconds, encode_seconds);
      if (admitted == 0) return;  // memory grows only when sentences join
      (*held)[size_t(loop)] = translators[size_t(loop)]->device_memory_used();
      size_t total = 0;
      for (const auto& bytes : *held) total += bytes;
      metrics.gpu_memory(name, device, static_cast<double>(total));
    };
    hooks.on_first_step = [&metrics, name](double seconds) { metrics.first_step(name, seconds); };
    // The loops leave texts empty: the scheduler's responder thread detokenizes, off the
    // loop threads.
    const Tokenizer* tokenizer = &served->tokenizer();
    served->scheduler = std::make_unique<Scheduler>(
        std::move(loops), config.batching, std::move(hooks),
        [tokenizer](const std::vector<int>& ids) { return tokenizer->decode(ids); });
    size_t reserved = 0;
    for (Translator* t : translators) reserved += t->device_memory_used();
    metrics.gpu_memory(name, device, static_cast<double>(reserved));
    metrics.model_loaded(name, device, true, int(translators.size()));
    models_.push_back(std::move(served));
  }
}

ModelRegistry::~ModelRegistry() { stop(); }

ServedModel& ModelRegistry::find(const std::string& name) {
  if (name.empty()) return *models_.front();
  std::string known;
  for (auto& m : models_) {
    if (m->name == name) return *m;
    known += (known.empty() ? "" : ", ") + m->name;
  }
  throw Error(ErrorCode::kNotFound, "model '" + name + "' is not served here (models: " + known + ")");
}

void ModelRegistry::stop() {
  for (auto& m : models_) {
    m->scheduler->stop();
    metrics_.model_loaded(m->name, m->device, false);
  }
}

}  // namespace nmt::server
