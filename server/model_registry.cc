#include "server/model_registry.h"

#include <stdexcept>

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

    const ServedModel* model = served.get();
    const std::string name = served->name, device = served->device;
    std::vector<TranslateBatchFn> translators;
    for (auto& t : served->translators) {
      Translator* translator = t.get();
      translators.push_back([translator, model, &metrics, name, device](
                                const std::vector<std::vector<int>>& ids,
                                const DecodeOptions& options, BatchStats* stats,
                                const CancelFn& cancelled) {
        auto result = translator->translate_ids(ids, options, stats, cancelled);
        metrics.gpu_memory(name, device, static_cast<double>(model->device_memory_used()));
        return result;
      });
    }
    BatchHook on_batch = [&metrics, name](size_t sentences, const BatchStats& stats) {
      metrics.batch(name, sentences, stats);
    };
    served->batcher = std::make_unique<Batcher>(std::move(translators), config.batching, on_batch);
    metrics.model_loaded(name, device, true);
    metrics.gpu_memory(name, device, static_cast<double>(served->device_memory_used()));
    models_.push_back(std::move(served));
  }
}

size_t ServedModel::device_memory_used() const {
  size_t bytes = 0;
  for (const auto& t : translators) bytes += t->device_memory_used();
  return bytes;
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
    m->batcher->stop();
    metrics_.model_loaded(m->name, m->device, false);
  }
}

}  // namespace nmt::server
