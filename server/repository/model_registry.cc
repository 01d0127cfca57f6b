#include "server/repository/model_registry.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "model/error.h"
#include "model/host_memory.h"
#include "server/observability/logging.h"
#include "server/repository/eviction_policy.h"
#include "server/repository/model_folder.h"
#include "server/repository/model_languages.h"

namespace nmt::server {
namespace {

// How long a load waits for busy models to go idle (or retired versions to be freed)
// before it gives up RESOURCE_EXHAUSTED.
constexpr auto kBudgetWait = std::chrono::seconds(5);
constexpr auto kJanitorPeriod = std::chrono::milliseconds(50);

std::string mib(size_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

std::string device_key(int index) { return index < 0 ? "cpu" : "cuda:" + std::to_string(index); }

// A load's estimate: what its last load measured, else the weights file once per worker's
// engine (the engines hold the weights plus their decode state: corrected once loaded).
DeviceBytes estimate(const ModelEntry& entry, const DeviceBytes& measured) {
  if (!measured.empty()) return measured;
  DeviceBytes need;
  std::error_code ec;
  const size_t weights = std::filesystem::file_size(entry.path + "/model.safetensors", ec);
  try {
    for (int index : replica_devices(entry)) need[device_key(index)] = ec ? 0 : weights * size_t(entry.workers);
  } catch (const std::exception&) {
    need.clear();  // the load itself reports it
  }
  return need;
}

DeviceBytes memory_of(const ServedModel& model) {
  DeviceBytes bytes;
  for (const auto& r : model.replicas) bytes[r->device] += r->memory_bytes;
  return bytes;
}

}  // namespace

const char* model_state_name(ModelState state) {
  switch (state) {
    case ModelState::kUnloaded: return "unloaded";
    case ModelState::kLoading: return "loading";
    case ModelState::kLoaded: return "loaded";
    case ModelState::kFailed: return "failed";
  }
  return "?";
}

ModelRegistry::ModelRegistry(const ServerConfig& config, Metrics& metrics)
    : config_(config), metrics_(metrics),
      budget_bytes_(size_t(config.repository.memory_budget_mb) << 20) {
  for (const ModelEntry& entry : config.models) {
    if (default_name_.empty()) default_name_ = entry.name;
    if (entry.path.empty()) {
      settings_[entry.name] = entry;
      continue;
    }
    auto record = std::make_shared<ModelRecord>();
    record->name = entry.name;
    record->entry = entry;
    record->fingerprint = model_fingerprint(entry.path);
    record->languages = model_languages(entry.path, entry.name);
    records_[entry.name] = record;
    metrics_.model_listed(entry.name);
    std::unique_lock<std::mutex> lock(mutex_);
    try {
      load_and_answer_locked(record, lock);
    } catch (const std::exception& e) {
      // A configured model that does not load stops the server (as before the repository).
      throw std::runtime_error(record->reason.empty() ? e.what() : record->reason);
    }
  }
  if (!config.repository.path.empty()) {
    const std::map<std::string, ModelFolder> folders = scan_model_folders(config.repository.path);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [name, folder] : folders) {
        if (auto it = records_.find(name); it != records_.end()) {
          // The models: entry of that name serves it; a warning only when it serves
          // another folder.
          if (std::filesystem::path(it->second->entry.path).lexically_normal() !=
              std::filesystem::path(folder.path).lexically_normal()) {
            log_event(spdlog::level::warn, "repository model shadowed by a models: entry",
                      {{"model", name}, {"folder", folder.path}, {"served", it->second->entry.path}});
          }
          continue;
        }
        add_repository_record_locked(name, folder);
      }
    }
    for (const std::string& name : config.repository.preload) {
      try {
        acquire(name);
      } catch (const std::exception& e) {
        log_event(spdlog::level::err, "preload failed", {{"model", name}, {"error", e.what()}});
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    started_ = true;
  }
  janitor_ = std::thread([this] { janitor(); });
}

ModelRegistry::~ModelRegistry() { stop(); }

std::shared_ptr<ModelRegistry::ModelRecord> ModelRegistry::add_repository_record_locked(
    const std::string& name, const ModelFolder& folder) {
  const std::string& path = folder.path;
  const std::string& missing = folder.missing;
  auto record = std::make_shared<ModelRecord>();
  record->name = name;
  auto settings = settings_.find(name);
  record->entry = settings != settings_.end() ? settings->second : config_.repository.defaults;
  record->entry.name = name;
  record->entry.path = path;
  record->from_repository = true;
  record->fingerprint = folder.fingerprint;
  if (!missing.empty()) {
    record->state = ModelState::kFailed;
    record->reason = "missing model files: " + missing;
  }
  record->languages = folder.languages;
  records_[name] = record;
  metrics_.model_listed(name);
  return record;
}

std::shared_ptr<ModelRegistry::ModelRecord> ModelRegistry::find_locked(const std::string& name) const {
  if (name.empty() && default_name_.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "this server has no default model: set the request's model (ListModels lists them)");
  }
  const std::string& wanted = name.empty() ? default_name_ : name;
  auto it = records_.find(wanted);
  if (it != records_.end()) return it->second;
  std::string known;
  for (const auto& [n, record] : records_) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::kNotFound,
              "model '" + wanted + "' is not served here (models: " + known + ")");
}

std::shared_ptr<ServedModel> ModelRegistry::acquire(const std::string& name) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (stopping_) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
    std::shared_ptr<ModelRecord> record = find_locked(name);
    switch (record->state) {
      case ModelState::kLoaded:
        record->last_used = ++tick_;
        return record->current;
      case ModelState::kLoading:
        changed_.wait(lock);  // the one load under way; then look again
        break;
      case ModelState::kFailed:
        std::rethrow_exception(refusal_locked(*record));
      case ModelState::kUnloaded:
        load_and_answer_locked(record, lock);
        break;
    }
  }
}

std::exception_ptr ModelRegistry::refusal_locked(const ModelRecord& record) const {
  return std::make_exception_ptr(
      Error(ErrorCode::kUnavailable, "model '" + record.name + "' failed to load: " + record.reason +
                                         " (fix its folder, then reload: SIGHUP or ModelControl.Reload)"));
}

void ModelRegistry::acquire_async(const std::string& name, Acquired then) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<ModelRecord> record;
  std::exception_ptr error;
  try {
    if (stopping_) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
    record = find_locked(name);
  } catch (...) {
    error = std::current_exception();
  }
  if (!error && record->state == ModelState::kFailed) error = refusal_locked(*record);
  if (error || record->state == ModelState::kLoaded) {
    std::shared_ptr<ServedModel> model;
    if (!error) {
      record->last_used = ++tick_;
      model = record->current;
    }
    lock.unlock();
    then(std::move(model), error);
    return;
  }
  record->waiters.push_back(std::move(then));
  if (record->state == ModelState::kLoading) return;  // the load under way answers it
  record->state = ModelState::kLoading;  // later callers wait for this load
  ++loader_threads_;
  std::thread([this, record]() mutable {
    std::unique_lock<std::mutex> lock(mutex_);
    try {
      if (stopping_) {
        record->state = ModelState::kUnloaded;
        throw Error(ErrorCode::kUnavailable, "the server is shutting down");
      }
      load_and_answer_locked(record, lock);
    } catch (...) {
      // load_and_answer_locked answered the waiters; a stop before the load did not.
      answer_waiters_locked(*record, nullptr, std::current_exception(), lock);
    }
    record.reset();  // under the lock: after the notify nothing of the registry's is touched
    --loader_threads_;
    changed_.notify_all();  // stop() waits for the last loader
  }).detach();
}

void ModelRegistry::load_and_answer_locked(const std::shared_ptr<ModelRecord>& record,
                                           std::unique_lock<std::mutex>& lock) {
  std::exception_ptr error;
  try {
    load_locked(record, lock);
  } catch (...) {
    error = std::current_exception();
  }
  answer_waiters_locked(*record, error ? nullptr : record->current, error, lock);
  if (error) std::rethrow_exception(error);
}

void ModelRegistry::answer_waiters_locked(ModelRecord& record, const std::shared_ptr<ServedModel>& model,
                                          const std::exception_ptr& error,
                                          std::unique_lock<std::mutex>& lock) {
  std::vector<Acquired> waiters;
  waiters.swap(record.waiters);
  if (waiters.empty()) return;
  lock.unlock();  // they submit work and may finish calls
  for (Acquired& w : waiters) w(model, error);
  lock.lock();
}

void ModelRegistry::load_locked(const std::shared_ptr<ModelRecord>& record, std::unique_lock<std::mutex>& lock) {
  record->state = ModelState::kLoading;
  const ModelEntry entry = record->entry;
  const bool budgeted = record->from_repository && budget_bytes_ > 0;
  auto give_up = [&](ModelState state, const std::string& reason) {
    record->state = state;
    record->reason = reason;
    changed_.notify_all();
  };
  if (budgeted) {
    try {
      make_room_locked(*record, estimate(entry, record->measured), lock);
    } catch (const Error& e) {
      give_up(ModelState::kUnloaded, e.what());
      throw;
    }
  }

  lock.unlock();
  double seconds = 0;
  std::string error;
  std::shared_ptr<ServedModel> model = timed_load(entry, &seconds, &error);
  lock.lock();

  if (!error.empty()) {
    // A `models:` entry's failure at start stops the server, which logs it once.
    if (record->from_repository || started_) {
      log_event(spdlog::level::err, "model load failed", {{"model", entry.name}, {"error", error}});
    }
    give_up(ModelState::kFailed, error);
    throw Error(ErrorCode::kUnavailable, error);
  }
  const DeviceBytes actual = memory_of(*model);
  record->measured = actual;  // the next load's estimate, whatever becomes of this one
  // Dropped outside the lock on every failure path below (stopping a scheduler joins).
  auto discard = [&](ModelState state, const std::string& reason, ErrorCode code) {
    give_up(state, reason);
    lock.unlock();
    model.reset();
    lock.lock();
    throw Error(code, reason);
  };
  if (record->removed) {
    discard(ModelState::kUnloaded, "model '" + entry.name + "' was removed from the repository",
            ErrorCode::kNotFound);
  }
  if (budgeted) {
    try {
      make_room_locked(*record, actual, lock);  // the measure may exceed the estimate
    } catch (const Error& e) {
      discard(ModelState::kUnloaded, e.what(), e.code());
    }
  }
  publish_locked(*record, std::move(model), seconds, "model loaded");
  record->last_used = ++tick_;
  changed_.notify_all();
}

std::shared_ptr<ServedModel> ModelRegistry::timed_load(const ModelEntry& entry, double* seconds,
                                                       std::string* error) {
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<ServedModel> model;
  try {
    model = load_served_model(entry, config_, metrics_);
  } catch (const std::exception& e) {
    *error = e.what();
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_.model_load(entry.name, error->empty(), *seconds);
  return model;
}

void ModelRegistry::publish_locked(ModelRecord& record, std::shared_ptr<ServedModel> model, double seconds,
                                   const char* event) {
  model->is_default = record.name == default_name_;
  record.measured = memory_of(*model);
  retire_locked(record, "replaced by a new version");  // a reload's previous version
  record.current = std::move(model);
  record.state = ModelState::kLoaded;
  record.reason.clear();
  const ServedModel& current = *record.current;
  int loops = 0;
  for (const auto& r : current.replicas) loops += int(r->loops.size());
  for (const auto& r : current.replicas) metrics_.model_loaded(record.name, r->device, true, loops);
  count_loaded_locked();
  log_event(spdlog::level::info, event,
            {{"model", record.name}, {"device", current.device}, {"replicas", current.replicas.size()},
             {"precision", current.precision}, {"memory_mib", double(current.memory_bytes()) / (1 << 20)},
             {"seconds", seconds}});
}

void ModelRegistry::count_loaded_locked() {
  size_t loaded = 0;
  for (const auto& [n, r] : records_) loaded += r->state == ModelState::kLoaded;
  metrics_.models_loaded(double(loaded));
}

DeviceBytes ModelRegistry::usage_locked() const {
  DeviceBytes used;
  auto add = [&used](const ServedModel& m) {
    for (const auto& [device, bytes] : memory_of(m)) used[device] += bytes;
  };
  for (const auto& [name, record] : records_) {
    if (record->from_repository && record->current) add(*record->current);
  }
  for (const auto& m : retired_) add(*m);  // freed once unheld: still there until then
  return used;
}

void ModelRegistry::make_room_locked(const ModelRecord& record, const DeviceBytes& need,
                                     std::unique_lock<std::mutex>& lock) {
  const std::string budget = "model_repository.memory_budget_mb (" + mib(budget_bytes_) + ")";
  for (const auto& [device, bytes] : need) {
    if (bytes > budget_bytes_) {
      throw Error(ErrorCode::kResourceExhausted,
                  "model '" + record.name + "' needs " + mib(bytes) + " on " + device + ", more than " +
                      budget + " allows: it cannot be loaded");
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + kBudgetWait;
  while (true) {
    reap_locked();
    std::vector<EvictionCandidate> loaded;
    for (const auto& [name, other] : records_) {
      if (!other->from_repository || other->state != ModelState::kLoaded) continue;
      loaded.push_back({name, memory_of(*other->current), other->last_used, other.get() == &record,
                        !other->current->idle()});
    }
    const EvictionPlan plan = plan_eviction(need, usage_locked(), budget_bytes_, loaded);
    if (plan.evict.empty() && plan.over.empty()) return;
    if (!plan.evict.empty()) {
      for (const std::string& name : plan.evict) {
        retire_locked(*records_.at(name), "evicted");
        metrics_.model_evicted(name);
      }
      continue;  // a version a request still holds is freed later: look again
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string busy;
      for (const std::string& name : plan.busy) busy += (busy.empty() ? "" : ", ") + name;
      throw Error(ErrorCode::kResourceExhausted,
                  "cannot load model '" + record.name + "': " + budget + " on " + plan.over.front() +
                      " is held by models in use (" + (busy.empty() ? "being unloaded" : busy) +
                      "); retry later");
    }
    // Busy models go idle, retired versions are freed: look again shortly.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.lock();
  }
}

void ModelRegistry::retire_locked(ModelRecord& record, const char* why) {
  if (!record.current) return;
  for (const auto& r : record.current->replicas) metrics_.model_loaded(record.name, r->device, false);
  log_event(spdlog::level::info, "model unloaded", {{"model", record.name}, {"why", why}});
  retired_.push_back(std::move(record.current));
  record.current.reset();
  if (record.state == ModelState::kLoaded) record.state = ModelState::kUnloaded;
  count_loaded_locked();
  reap_locked();
}

void ModelRegistry::reap_locked() {
  // use_count() == 1: no request holds it, and none can take it any more (it left the
  // records), so it is idle and its destruction (scheduler stop, joins) is quick.
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->use_count() == 1 && (*it)->idle()) {
      it = retired_.erase(it);
      freed_ = true;
    } else {
      ++it;
    }
  }
}

void ModelRegistry::janitor() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    changed_.wait_for(lock, kJanitorPeriod);
    reap_locked();
    if (!freed_) continue;
    freed_ = false;
    // A freed version's host memory (the CPU engine's weights, the CUDA driver's executable
    // graphs) stays in the allocator's free lists (the threads that allocated it are gone),
    // while the next version, built and decoding on new threads, allocates afresh: every
    // reload would keep more resident (docs/server.md, "Model repository"). Given back to the
    // system here, outside the lock, as the CPU engine does when its last sentence leaves.
    lock.unlock();
    release_free_heap_memory();
    lock.lock();
  }
}

void ModelRegistry::unload(const std::string& name) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<ModelRecord> record = find_locked(name);
  while (record->state == ModelState::kLoading && !stopping_) changed_.wait(lock);
  retire_locked(*record, "unload requested");
  if (record->state == ModelState::kFailed) {  // may be fixed: the next request tries again
    record->state = ModelState::kUnloaded;
    record->reason.clear();
  }
}

ModelStatus ModelRegistry::status_locked(const ModelRecord& record) const {
  ModelStatus s;
  s.name = record.name;
  s.state = record.state;
  s.reason = record.reason;
  s.precision = record.entry.precision;
  // A loaded version's languages are its tokenizer's; the folder's until it loads.
  const ModelLanguages& languages = record.current ? record.current->languages : record.languages;
  s.source_language = languages.source;
  s.target_language = languages.target;
  s.languages = languages.codes;
  s.is_default = record.name == default_name_;
  s.from_repository = record.from_repository;
  if (record.current) {
    s.device = record.current->device;
    s.devices = record.current->devices();
    s.precision = record.current->precision;
    s.memory_bytes = record.current->memory_bytes();
    s.vocab_size = record.current->vocab_size();
  }
  return s;
}

std::vector<ModelStatus> ModelRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ModelStatus> out;
  // The default model first, then by name.
  for (const auto& [name, record] : records_) {
    if (name == default_name_) out.insert(out.begin(), status_locked(*record));
    else out.push_back(status_locked(*record));
  }
  return out;
}

ModelStatus ModelRegistry::status(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_locked(*find_locked(name));
}

void ModelRegistry::stop() {
  std::vector<std::shared_ptr<ServedModel>> models;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
    // A load under way ends (its waiters answered) before the models are stopped.
    changed_.wait(lock, [this] { return loader_threads_ == 0; });
    for (auto& [name, record] : records_) {
      if (record->current) models.push_back(record->current);
    }
    for (auto& m : retired_) models.push_back(m);
  }
  if (janitor_.joinable()) janitor_.join();
  for (auto& m : models) {
    m->stop();
    for (const auto& r : m->replicas) metrics_.model_loaded(m->name, r->device, false);
  }
}

}  // namespace nmt::server
