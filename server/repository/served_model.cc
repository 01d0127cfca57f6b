#include "server/repository/served_model.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <thread>

#include "model/cuda_engine.h"
#include "model/error.h"
#include "model/text/glossary.h"

namespace nmt::server {

uint64_t next_model_generation() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
namespace {

TranslatorOptions translator_options(const ModelEntry& entry, int device_index) {
  TranslatorOptions options;
  if (!parse_device(entry.device, &options.device)) {
    throw Error(ErrorCode::kInvalidArgument, "unknown device '" + entry.device + "'");
  }
  if (!parse_precision(entry.precision, &options.precision)) {
    throw Error(ErrorCode::kInvalidArgument, "unknown precision '" + entry.precision + "'");
  }
  if (device_index >= 0) options.device_index = device_index;
  options.device_memory_limit = static_cast<size_t>(entry.device_memory_limit_mb) << 20;
  // CPU: loops run at once, so each takes its share of the cores rather than all of them.
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  options.threads = entry.threads > 0 ? entry.threads : std::max(1, cores / std::max(1, entry.workers));
  return options;
}

// One replica: `workers` translators on `device_index` (-1 = CPU), a decode loop over each
// and their scheduler. Loop metrics are numbered from `first_loop` across the replicas.
std::unique_ptr<Replica> load_replica(const ModelEntry& entry, int device_index, int first_loop,
                                      const ServerConfig& config, Metrics& metrics) {
  auto replica = std::make_unique<Replica>();
  for (int w = 0; w < entry.workers; ++w) {
    replica->translators.push_back(
        Translator::load(entry.path, translator_options(entry, device_index)));
  }
  const Translator& first = *replica->translators.front();
  // The model's position table bounds source and target lengths; refuse limits beyond it
  // here rather than failing batches later.
  const int positions = first.config().max_positions;
  if (config.limits.max_input_tokens > positions || config.limits.max_decoding_length > positions) {
    throw std::runtime_error(
        "it has " + std::to_string(positions) +
        " positions (max_position_embeddings): limits.max_input_tokens (" +
        std::to_string(config.limits.max_input_tokens) + ") and limits.max_decoding_length (" +
        std::to_string(config.limits.max_decoding_length) + ") must not exceed it");
  }
  replica->device = first.device() == Device::kCpu ? "cpu" : "cuda:" + std::to_string(device_index);

  // Every slot holds the longest source a request may send.
  const EngineCapacity capacity{config.batching.max_active_sentences,
                                config.batching.max_active_rows, config.limits.max_input_tokens};
  std::vector<DecodeLoop*> loops;
  try {
    for (auto& t : replica->translators) {
      replica->loops.push_back(t->make_loop(capacity));
      replica->loops.back()->set_follow_rows(config.batching.follow_rows);
      loops.push_back(replica->loops.back().get());
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(
        "cannot reserve its decode state (batching.max_active_sentences, max_active_rows, "
        "limits.max_input_tokens): " + std::string(e.what()));
  }
  // Measured now, before any loop thread runs (engines are not thread-safe).
  for (auto& t : replica->translators) replica->memory_bytes += t->memory_held();

  std::vector<Translator*> translators;
  for (auto& t : replica->translators) translators.push_back(t.get());
  const std::string name = entry.name, device = replica->device;
  SchedulerHooks hooks;
  // Each loop reads its own engine's memory on its own thread (engines are not
  // thread-safe) and publishes it here; the gauge shows the replica's sum.
  auto held = std::make_shared<std::vector<std::atomic<size_t>>>(translators.size());
  for (size_t i = 0; i < translators.size(); ++i) (*held)[i] = translators[i]->device_memory_used();
  // Each loop's series, looked up once (the histograms are the model's, shared by its loops:
  // prometheus-cpp's histograms take their own lock).
  auto series = std::make_shared<std::vector<Metrics::Loop>>();
  for (size_t i = 0; i < translators.size(); ++i) series->push_back(metrics.loop(entry.name, first_loop + int(i)));
  auto publish_memory = [&metrics, name, device, translators, held](int loop) {
    (*held)[size_t(loop)] = translators[size_t(loop)]->device_memory_used();
    size_t total = 0;
    for (const auto& bytes : *held) total += bytes;
    metrics.gpu_memory(name, device, static_cast<double>(total));
  };
  // Read when sentences join (the memory grows) and when an idle loop's engine gives memory
  // back (no step follows to show it): a loop left idle after a burst would otherwise keep
  // showing the burst's memory until it admits again. Releases under load show at the next
  // admission.
  hooks.on_step = [series, publish_memory](int loop, int rows, int sentences, int admitted, double step_seconds,
                                           double encode_seconds) {
    (*series)[size_t(loop)].step(rows, sentences, admitted, step_seconds, encode_seconds);
    if (admitted > 0) publish_memory(loop);
  };
  hooks.on_idle_trim = publish_memory;
  hooks.on_first_step = [series](double seconds) { series->front().first_step(seconds); };
  // The loops leave texts empty: the scheduler's responder thread detokenizes, off the
  // loop threads.
  const Tokenizer* tokenizer = &first.tokenizer();
  SchedulingOptions batching = config.batching;
  // The CPU's loops run on cores of their own: filling one first would leave the others' idle.
  if (first.device() == Device::kCpu) batching.loop_fill_sentences = 0;
  replica->scheduler = std::make_unique<Scheduler>(
      std::move(loops), batching, std::move(hooks),
      [tokenizer](const std::vector<int>& ids) { return tokenizer->decode(ids); });
  size_t reserved = 0;
  for (Translator* t : translators) reserved += t->device_memory_used();
  metrics.gpu_memory(name, device, static_cast<double>(reserved));
  return replica;
}

}  // namespace

Replica& ServedModel::least_loaded() {
  const size_t n = replicas.size();
  const size_t start = next_.fetch_add(1, std::memory_order_relaxed) % n;
  Replica* best = nullptr;
  size_t best_load = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < n; ++i) {
    Replica& r = *replicas[(start + i) % n];
    const size_t load = r.load();
    if (load < best_load) {
      best = &r;
      best_load = load;
    }
  }
  return *best;
}

bool ServedModel::idle() const {
  for (const auto& r : replicas) {
    if (r->load() > 0) return false;
  }
  return true;
}

void ServedModel::stop() {
  for (auto& r : replicas) r->scheduler->stop();
}

size_t ServedModel::memory_bytes() const {
  size_t total = 0;
  for (const auto& r : replicas) total += r->memory_bytes;
  return total;
}

std::vector<std::string> ServedModel::devices() const {
  std::vector<std::string> out;
  for (const auto& r : replicas) out.push_back(r->device);
  return out;
}

std::vector<int> replica_devices(const ModelEntry& entry) {
  Device device = Device::kAuto;
  parse_device(entry.device, &device);
  const int visible = cuda_device_count();
  if (device == Device::kCpu || (device == Device::kAuto && visible == 0)) return {-1};
  if (entry.all_devices) {
    std::vector<int> all;
    for (int i = 0; i < std::max(visible, 1); ++i) all.push_back(i);  // none: the engine says why
    return all;
  }
  if (entry.devices.empty()) return {0};
  for (int index : entry.devices) {
    if (index >= visible) {
      throw Error(ErrorCode::kInvalidArgument,
                  "devices: GPU " + std::to_string(index) + " is not visible (" +
                      std::to_string(visible) + " GPUs; indices in nvidia-smi order from 0)");
    }
  }
  return entry.devices;
}

std::shared_ptr<ServedModel> load_served_model(const ModelEntry& entry, const ServerConfig& config,
                                               Metrics& metrics) {
  auto served = std::make_shared<ServedModel>();
  served->name = entry.name;
  served->path = entry.path;
  try {
    // Each replica loads on its own thread: a load is mostly reading and uploading weights
    // to its own device, so N GPUs load in about the time of one (loaded one after the
    // other, two replicas of Transformer-base took 1.8x one's time).
    const std::vector<int> devices = replica_devices(entry);
    std::vector<std::unique_ptr<Replica>> loaded(devices.size());
    std::vector<std::exception_ptr> errors(devices.size());
    std::vector<std::thread> loaders;
    for (size_t i = 0; i < devices.size(); ++i) {
      loaders.emplace_back([&, i] {
        try {
          loaded[i] = load_replica(entry, devices[i], int(i) * entry.workers, config, metrics);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (std::thread& t : loaders) t.join();
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);  // the replicas that loaded are dropped
    }
    served->replicas = std::move(loaded);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot load model '" + entry.name + "' from " + entry.path + ": " +
                             e.what());
  }
  const Translator& first = *served->replicas.front()->translators.front();
  served->languages = first.tokenizer().languages().empty()
                          ? model_languages(entry.path, entry.name)
                          : multilingual_languages(first.tokenizer(), first.config());
  // The model's glossary (docs/decoding.md, "Glossary"): a bad file fails the load (a reload
  // then leaves the version before it serving), never a glossary half read.
  const std::string glossary = (std::filesystem::path(entry.path) / "glossary.tsv").string();
  if (std::filesystem::exists(glossary)) {
    try {
      served->glossary = load_glossary_file(glossary);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot load model '" + entry.name + "': " + e.what());
    }
  }
  served->device = device_name(first.device());
  served->precision = precision_name(first.precision());
  return served;
}

}  // namespace nmt::server
