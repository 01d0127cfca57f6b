#include "server/repository/model_registry.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "model/error.h"
#include "server/observability/logging.h"
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

struct ModelRegistry::Slot {
  std::string name;
  ModelEntry entry;  // path and settings
  bool from_repository = false;
  bool removed = false;  // its folder went away: dropped from slots_
  ModelState state = ModelState::kUnloaded;
  std::string reason;
  std::string fingerprint;  // of the files as last listed
  std::shared_ptr<ServedModel> current;
  uint64_t last_used = 0;
  DeviceBytes measured;  // per device, from its last load: the next load's estimate
  ModelLanguages languages;  // from the folder (its tokenizer files or name), as last listed
  std::vector<Acquired> waiters;  // acquire_async calls waiting for the load under way
};

ModelRegistry::ModelRegistry(const ServerConfig& config, Metrics& metrics)
    : config_(config), metrics_(metrics),
      budget_bytes_(size_t(config.repository.memory_budget_mb) << 20) {
  for (const ModelEntry& entry : config.models) {
    if (default_name_.empty()) default_name_ = entry.name;
    if (entry.path.empty()) {
      settings_[entry.name] = entry;
      continue;
    }
    auto slot = std::make_shared<Slot>();
    slot->name = entry.name;
    slot->entry = entry;
    slot->fingerprint = model_fingerprint(entry.path);
    slot->languages = model_languages(entry.path, entry.name);
    slots_[entry.name] = slot;
    metrics_.model_listed(entry.name);
    std::unique_lock<std::mutex> lock(mutex_);
    try {
      load_and_answer_locked(slot, lock);
    } catch (const std::exception& e) {
      // A configured model that does not load stops the server (as before the repository).
      throw std::runtime_error(slot->reason.empty() ? e.what() : slot->reason);
    }
  }
  if (!config.repository.path.empty()) {
    const std::map<std::string, ModelFolder> folders = scan_model_folders(config.repository.path);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [name, folder] : folders) {
        if (auto it = slots_.find(name); it != slots_.end()) {
          // The models: entry of that name serves it; a warning only when it serves
          // another folder.
          if (std::filesystem::path(it->second->entry.path).lexically_normal() !=
              std::filesystem::path(folder.path).lexically_normal()) {
            log_event(spdlog::level::warn, "repository model shadowed by a models: entry",
                      {{"model", name}, {"folder", folder.path}, {"served", it->second->entry.path}});
          }
          continue;
        }
        add_repository_slot_locked(name, folder);
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

std::shared_ptr<ModelRegistry::Slot> ModelRegistry::add_repository_slot_locked(
    const std::string& name, const ModelFolder& folder) {
  const std::string& path = folder.path;
  const std::string& missing = folder.missing;
  auto slot = std::make_shared<Slot>();
  slot->name = name;
  auto settings = settings_.find(name);
  slot->entry = settings != settings_.end() ? settings->second : config_.repository.defaults;
  slot->entry.name = name;
  slot->entry.path = path;
  slot->from_repository = true;
  slot->fingerprint = folder.fingerprint;
  if (!missing.empty()) {
    slot->state = ModelState::kFailed;
    slot->reason = "missing model files: " + missing;
  }
  slot->languages = folder.languages;
  slots_[name] = slot;
  metrics_.model_listed(name);
  return slot;
}

std::shared_ptr<ModelRegistry::Slot> ModelRegistry::find_locked(const std::string& name) const {
  if (name.empty() && default_name_.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "this server has no default model: set the request's model (ListModels lists them)");
  }
  const std::string& wanted = name.empty() ? default_name_ : name;
  auto it = slots_.find(wanted);
  if (it != slots_.end()) return it->second;
  std::string known;
  for (const auto& [n, slot] : slots_) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::kNotFound,
              "model '" + wanted + "' is not served here (models: " + known + ")");
}

std::shared_ptr<ServedModel> ModelRegistry::acquire(const std::string& name) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (stopping_) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
    std::shared_ptr<Slot> slot = find_locked(name);
    switch (slot->state) {
      case ModelState::kLoaded:
        slot->last_used = ++tick_;
        return slot->current;
      case ModelState::kLoading:
        changed_.wait(lock);  // the one load under way; then look again
        break;
      case ModelState::kFailed:
        std::rethrow_exception(refusal_locked(*slot));
      case ModelState::kUnloaded:
        load_and_answer_locked(slot, lock);
        break;
    }
  }
}

std::exception_ptr ModelRegistry::refusal_locked(const Slot& slot) const {
  return std::make_exception_ptr(
      Error(ErrorCode::kUnavailable, "model '" + slot.name + "' failed to load: " + slot.reason +
                                         " (fix its folder, then reload: SIGHUP or ModelControl.Reload)"));
}

void ModelRegistry::acquire_async(const std::string& name, Acquired then) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<Slot> slot;
  std::exception_ptr error;
  try {
    if (stopping_) throw Error(ErrorCode::kUnavailable, "the server is shutting down");
    slot = find_locked(name);
  } catch (...) {
    error = std::current_exception();
  }
  if (!error && slot->state == ModelState::kFailed) error = refusal_locked(*slot);
  if (error || slot->state == ModelState::kLoaded) {
    std::shared_ptr<ServedModel> model;
    if (!error) {
      slot->last_used = ++tick_;
      model = slot->current;
    }
    lock.unlock();
    then(std::move(model), error);
    return;
  }
  slot->waiters.push_back(std::move(then));
  if (slot->state == ModelState::kLoading) return;  // the load under way answers it
  slot->state = ModelState::kLoading;  // later callers wait for this load
  ++loader_threads_;
  std::thread([this, slot]() mutable {
    std::unique_lock<std::mutex> lock(mutex_);
    try {
      if (stopping_) {
        slot->state = ModelState::kUnloaded;
        throw Error(ErrorCode::kUnavailable, "the server is shutting down");
      }
      load_and_answer_locked(slot, lock);
    } catch (...) {
      // load_and_answer_locked answered the waiters; a stop before the load did not.
      answer_waiters_locked(*slot, nullptr, std::current_exception(), lock);
    }
    slot.reset();  // under the lock: after the notify nothing of the registry's is touched
    --loader_threads_;
    changed_.notify_all();  // stop() waits for the last loader
  }).detach();
}

void ModelRegistry::load_and_answer_locked(const std::shared_ptr<Slot>& slot,
                                           std::unique_lock<std::mutex>& lock) {
  std::exception_ptr error;
  try {
    load_locked(slot, lock);
  } catch (...) {
    error = std::current_exception();
  }
  answer_waiters_locked(*slot, error ? nullptr : slot->current, error, lock);
  if (error) std::rethrow_exception(error);
}

void ModelRegistry::answer_waiters_locked(Slot& slot, const std::shared_ptr<ServedModel>& model,
                                          const std::exception_ptr& error,
                                          std::unique_lock<std::mutex>& lock) {
  std::vector<Acquired> waiters;
  waiters.swap(slot.waiters);
  if (waiters.empty()) return;
  lock.unlock();  // they submit work and may finish calls
  for (Acquired& w : waiters) w(model, error);
  lock.lock();
}

void ModelRegistry::load_locked(const std::shared_ptr<Slot>& slot, std::unique_lock<std::mutex>& lock) {
  slot->state = ModelState::kLoading;
  const ModelEntry entry = slot->entry;
  const bool budgeted = slot->from_repository && budget_bytes_ > 0;
  auto give_up = [&](ModelState state, const std::string& reason) {
    slot->state = state;
    slot->reason = reason;
    changed_.notify_all();
  };
  if (budgeted) {
    // The estimate: what its last load measured, else the weights file (the engines hold
    // the weights plus their decode state: corrected below once loaded).
    DeviceBytes need = slot->measured;
    if (need.empty()) {
      std::error_code ec;
      const size_t weights = std::filesystem::file_size(entry.path + "/model.safetensors", ec);
      try {
        // Each worker's engine holds its own copy of the weights.
        for (int index : replica_devices(entry)) {
          need[device_key(index)] = ec ? 0 : weights * size_t(entry.workers);
        }
      } catch (const std::exception&) {
        need.clear();  // the load itself reports it
      }
    }
    try {
      make_room_locked(*slot, need, lock);
    } catch (const Error& e) {
      give_up(ModelState::kUnloaded, e.what());
      throw;
    }
  }

  lock.unlock();
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<ServedModel> model;
  std::string error;
  try {
    model = load_served_model(entry, config_, metrics_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  lock.lock();

  metrics_.model_load(entry.name, error.empty(), seconds);
  if (!error.empty()) {
    // A `models:` entry's failure at start stops the server, which logs it once.
    if (slot->from_repository || started_) {
      log_event(spdlog::level::err, "model load failed", {{"model", entry.name}, {"error", error}});
    }
    give_up(ModelState::kFailed, error);
    throw Error(ErrorCode::kUnavailable, error);
  }
  DeviceBytes actual;
  for (const auto& r : model->replicas) actual[r->device] += r->memory_bytes;
  slot->measured = actual;
  // Dropped outside the lock on every failure path below (stopping a scheduler joins).
  auto discard = [&](ModelState state, const std::string& reason, ErrorCode code) {
    give_up(state, reason);
    lock.unlock();
    model.reset();
    lock.lock();
    throw Error(code, reason);
  };
  if (slot->removed) {
    discard(ModelState::kUnloaded, "model '" + entry.name + "' was removed from the repository",
            ErrorCode::kNotFound);
  }
  if (budgeted) {
    try {
      make_room_locked(*slot, actual, lock);  // the measure may exceed the estimate
    } catch (const Error& e) {
      discard(ModelState::kUnloaded, e.what(), e.code());
    }
  }
  slot->current = std::move(model);
  slot->current->is_default = entry.name == default_name_;
  slot->state = ModelState::kLoaded;
  slot->reason.clear();
  slot->last_used = ++tick_;
  int loops = 0;
  for (const auto& r : slot->current->replicas) loops += int(r->loops.size());
  for (const auto& r : slot->current->replicas) metrics_.model_loaded(entry.name, r->device, true, loops);
  size_t loaded = 0;
  for (const auto& [n, s] : slots_) loaded += s->state == ModelState::kLoaded;
  metrics_.models_loaded(double(loaded));
  nlohmann::ordered_json fields = {{"model", entry.name},
                                   {"device", slot->current->device},
                                   {"replicas", slot->current->replicas.size()},
                                   {"precision", slot->current->precision},
                                   {"memory_mib", double(slot->current->memory_bytes()) / (1 << 20)},
                                   {"seconds", seconds}};
  log_event(spdlog::level::info, "model loaded", fields);
  changed_.notify_all();
}

ModelRegistry::DeviceBytes ModelRegistry::usage_locked() const {
  DeviceBytes used;
  auto add = [&used](const ServedModel& m) {
    for (const auto& r : m.replicas) used[r->device] += r->memory_bytes;
  };
  for (const auto& [name, slot] : slots_) {
    if (slot->from_repository && slot->current) add(*slot->current);
  }
  for (const auto& m : retired_) add(*m);  // freed once unheld: still there until then
  return used;
}

void ModelRegistry::make_room_locked(const Slot& slot, const DeviceBytes& need,
                                     std::unique_lock<std::mutex>& lock) {
  const std::string budget = "model_repository.memory_budget_mb (" + mib(budget_bytes_) + ")";
  for (const auto& [device, bytes] : need) {
    if (bytes > budget_bytes_) {
      throw Error(ErrorCode::kResourceExhausted,
                  "model '" + slot.name + "' needs " + mib(bytes) + " on " + device + ", more than " +
                      budget + " allows: it cannot be loaded");
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + kBudgetWait;
  while (true) {
    reap_locked();
    const DeviceBytes used = usage_locked();
    std::vector<std::string> over;
    for (const auto& [device, bytes] : need) {
      auto u = used.find(device);
      if ((u == used.end() ? 0 : u->second) + bytes > budget_bytes_) over.push_back(device);
    }
    if (over.empty()) return;
    // The least recently used idle repository model on a device that is over.
    Slot* victim = nullptr;
    std::string busy;
    for (const auto& [name, other] : slots_) {
      if (other.get() == &slot || !other->from_repository || other->state != ModelState::kLoaded) continue;
      bool relevant = false;
      for (const auto& r : other->current->replicas) {
        relevant |= std::find(over.begin(), over.end(), r->device) != over.end();
      }
      if (!relevant) continue;
      if (!other->current->idle()) {
        busy += (busy.empty() ? "" : ", ") + name;
        continue;
      }
      if (!victim || other->last_used < victim->last_used) victim = other.get();
    }
    if (victim) {
      retire_locked(*victim, "evicted");
      metrics_.model_evicted(victim->name);
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(ErrorCode::kResourceExhausted,
                  "cannot load model '" + slot.name + "': " + budget + " on " + over.front() +
                      " is held by models in use (" + (busy.empty() ? "being unloaded" : busy) +
                      "); retry later");
    }
    // Busy models go idle, retired versions are freed: look again shortly.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lock.lock();
  }
}

void ModelRegistry::retire_locked(Slot& slot, const char* why) {
  if (!slot.current) return;
  for (const auto& r : slot.current->replicas) metrics_.model_loaded(slot.name, r->device, false);
  log_event(spdlog::level::info, "model unloaded", {{"model", slot.name}, {"why", why}});
  retired_.push_back(std::move(slot.current));
  slot.current.reset();
  if (slot.state == ModelState::kLoaded) slot.state = ModelState::kUnloaded;
  size_t loaded = 0;
  for (const auto& [n, s] : slots_) loaded += s->state == ModelState::kLoaded;
  metrics_.models_loaded(double(loaded));
  reap_locked();
}

void ModelRegistry::reap_locked() {
  // use_count() == 1: no request holds it, and none can take it any more (it left the
  // slots), so it is idle and its destruction (scheduler stop, joins) is quick.
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (it->use_count() == 1 && (*it)->idle()) {
      it = retired_.erase(it);
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
  }
}

void ModelRegistry::unload(const std::string& name) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::shared_ptr<Slot> slot = find_locked(name);
  while (slot->state == ModelState::kLoading && !stopping_) changed_.wait(lock);
  retire_locked(*slot, "unload requested");
  if (slot->state == ModelState::kFailed) {  // may be fixed: the next request tries again
    slot->state = ModelState::kUnloaded;
    slot->reason.clear();
  }
}

RescanReport ModelRegistry::rescan() {
  std::lock_guard<std::mutex> one(rescan_mutex_);
  RescanReport report;
  std::map<std::string, ModelFolder> folders;
  if (!config_.repository.path.empty()) {
    try {
      folders = scan_model_folders(config_.repository.path);
    } catch (const std::exception& e) {
      report.error = e.what();
      log_event(spdlog::level::err, "model repository rescan failed", {{"error", e.what()}});
      return report;
    }
  }
  std::vector<std::shared_ptr<Slot>> reload;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    for (auto it = slots_.begin(); it != slots_.end();) {
      Slot& slot = *it->second;
      if (!slot.from_repository || folders.count(slot.name)) {
        ++it;
        continue;
      }
      slot.removed = true;  // a load under way discards its result
      retire_locked(slot, "removed from the repository");
      report.removed.push_back(slot.name);
      it = slots_.erase(it);
    }
    for (const auto& [name, slot] : slots_) {
      std::string missing;
      const std::string fingerprint =
          slot->from_repository ? folders.at(name).fingerprint : model_fingerprint(slot->entry.path, &missing);
      if (slot->from_repository) missing = folders.at(name).missing;
      if (fingerprint == slot->fingerprint) continue;
      slot->fingerprint = fingerprint;
      // A configured model is always loaded: its version's tokenizer lists its languages.
      if (slot->from_repository) slot->languages = folders.at(name).languages;
      report.changed.push_back(name);
      if (!missing.empty()) {  // keeps serving what it has; a new load would fail
        slot->reason = "missing model files: " + missing;
        if (slot->state != ModelState::kLoaded) slot->state = ModelState::kFailed;
        report.failed.push_back(name);
      } else if (slot->state == ModelState::kLoaded) {
        reload.push_back(slot);
      } else if (slot->state == ModelState::kFailed) {
        slot->state = ModelState::kUnloaded;  // loads on its next request
        slot->reason.clear();
      }
    }
    for (const auto& [name, folder] : folders) {
      if (slots_.count(name)) continue;
      add_repository_slot_locked(name, folder);
      report.added.push_back(name);
    }
  }
  // Changed and loaded: the new version is loaded beside the old one, then swapped in. Under
  // a budget both versions must fit for that moment (the old one's measure estimates the
  // new one): idle models are evicted for it, and when that is not enough the old version
  // keeps serving and the reload is reported failed.
  for (const auto& slot : reload) {
    if (slot->from_repository && budget_bytes_ > 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      try {
        make_room_locked(*slot, slot->measured, lock);
      } catch (const Error& e) {
        slot->reason = std::string("reload postponed, the previous version still serves: ") +
                       e.what() + " (the new version loads beside it)";
        report.failed.push_back(slot->name);
        log_event(spdlog::level::warn, "model reload postponed", {{"model", slot->name}, {"error", e.what()}});
        continue;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    std::shared_ptr<ServedModel> fresh;
    std::string error;
    try {
      fresh = load_served_model(slot->entry, config_, metrics_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    metrics_.model_load(slot->name, error.empty(),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::unique_lock<std::mutex> lock(mutex_);
    if (!error.empty()) {
      slot->reason = "reload failed, the previous version still serves: " + error;
      report.failed.push_back(slot->name);
      log_event(spdlog::level::err, "model reload failed", {{"model", slot->name}, {"error", error}});
      continue;
    }
    if (slot->removed || slot->state != ModelState::kLoaded || stopping_) {
      lock.unlock();
      fresh.reset();
      continue;
    }
    fresh->is_default = slot->name == default_name_;
    slot->measured.clear();
    for (const auto& r : fresh->replicas) slot->measured[r->device] += r->memory_bytes;
    retire_locked(*slot, "replaced by a new version");
    slot->current = std::move(fresh);
    slot->state = ModelState::kLoaded;
    slot->reason.clear();
    int loops = 0;
    for (const auto& r : slot->current->replicas) loops += int(r->loops.size());
    for (const auto& r : slot->current->replicas) metrics_.model_loaded(slot->name, r->device, true, loops);
    size_t loaded = 0;
    for (const auto& [n, s] : slots_) loaded += s->state == ModelState::kLoaded;
    metrics_.models_loaded(double(loaded));
    log_event(spdlog::level::info, "model reloaded", {{"model", slot->name}});
  }
  log_event(spdlog::level::info, "model repository rescanned",
            {{"added", report.added}, {"removed", report.removed},
             {"changed", report.changed}, {"failed", report.failed}});
  return report;
}

ModelStatus ModelRegistry::status_locked(const Slot& slot) const {
  ModelStatus s;
  s.name = slot.name;
  s.state = slot.state;
  s.reason = slot.reason;
  s.precision = slot.entry.precision;
  // A loaded version's languages are its tokenizer's; the folder's until it loads.
  const ModelLanguages& languages = slot.current ? slot.current->languages : slot.languages;
  s.source_language = languages.source;
  s.target_language = languages.target;
  s.languages = languages.codes;
  s.is_default = slot.name == default_name_;
  s.from_repository = slot.from_repository;
  if (slot.current) {
    s.device = slot.current->device;
    s.devices = slot.current->devices();
    s.precision = slot.current->precision;
    s.memory_bytes = slot.current->memory_bytes();
    s.vocab_size = slot.current->vocab_size();
  }
  return s;
}

std::vector<ModelStatus> ModelRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ModelStatus> out;
  // The default model first, then by name.
  for (const auto& [name, slot] : slots_) {
    if (name == default_name_) out.insert(out.begin(), status_locked(*slot));
    else out.push_back(status_locked(*slot));
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
    for (auto& [name, slot] : slots_) {
      if (slot->current) models.push_back(slot->current);
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
