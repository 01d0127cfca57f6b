#pragma once
// The models the server serves, by name: the config's `models:` entries with a path
// (loaded at start, never evicted) and the folders of `model_repository.path` (loaded on
// their first request, within model_repository.memory_budget_mb per device, the least
// recently used idle one unloaded first). A model in use is held through shared_ptr: a
// reload swaps in the new version for new requests while the old one finishes what it holds,
// and is freed (by the janitor thread, off every request and scheduler thread) once nothing
// holds it.
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/config/config.h"
#include "server/observability/metrics.h"
#include "server/repository/eviction_policy.h"
#include "server/repository/model_folder.h"
#include "server/repository/model_languages.h"
#include "server/repository/served_model.h"

namespace nmt::server {

enum class ModelState { kUnloaded, kLoading, kLoaded, kFailed };
const char* model_state_name(ModelState state);  // unloaded | loading | loaded | failed

// One model as ListModels shows it.
struct ModelStatus {
  std::string name;
  ModelState state = ModelState::kUnloaded;
  std::string reason;  // failed: why; otherwise why the last load or reload was refused
  std::string device;  // cpu | cuda, once loaded
  std::vector<std::string> devices;  // its replicas' devices, once loaded
  std::string precision;
  std::string source_language, target_language;  // "" when unknown (ModelLanguages)
  std::vector<std::string> languages;  // a multilingual model's codes
  size_t memory_bytes = 0;  // measured, while loaded
  int vocab_size = 0;       // while loaded
  bool is_default = false;
  bool from_repository = false;
};

// What a rescan found, by model name.
struct RescanReport {
  std::vector<std::string> added, removed, changed, failed;
  std::string error;  // the repository could not be read ("" otherwise)
};

class ModelRegistry {
 public:
  // Loads the `models:` entries that have a path (throws std::runtime_error naming the
  // model when one fails: the server does not start), lists the repository and loads its
  // `preload` models (a failure there is logged and listed, never fatal).
  ModelRegistry(const ServerConfig& config, Metrics& metrics);
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // The model's loaded version, loaded first when it is not (concurrent callers wait for
  // the one load). "" = the default model (the first of `models:`). Throws nmt::Error:
  // kNotFound (no such model), kInvalidArgument ("" without a default), kResourceExhausted
  // (it cannot fit the memory budget), kUnavailable (it failed to load, or stopping).
  std::shared_ptr<ServedModel> acquire(const std::string& name);
  // acquire() without waiting: `then` gets the loaded version (and a null error) or what
  // acquire() would throw. It runs on this thread before the call returns when the model
  // is loaded or the error is known at once; otherwise the model loads on a thread of the
  // registry's and `then` runs there when the load ends, so that a request waiting for a
  // load holds no gRPC thread.
  using Acquired = std::function<void(std::shared_ptr<ServedModel>, std::exception_ptr)>;
  void acquire_async(const std::string& name, Acquired then);
  // Unloads the model (its in-flight sentences finish first); throws kNotFound.
  void unload(const std::string& name);
  // Lists the repository again: new folders are listed (unloaded), removed ones unloaded
  // and dropped, changed ones (any model file's size or mtime) reloaded now when loaded:
  // requests admitted before keep the old version. The `models:` entries' folders too.
  RescanReport rescan();

  std::vector<ModelStatus> list() const;
  ModelStatus status(const std::string& name) const;  // throws kNotFound

  // Finishes queued and decoding work and stops every model (shutdown). Idempotent.
  void stop();

 private:
  // One model by name (an entry of records_): its settings, state and served version.
  struct ModelRecord {
    std::string name;
    ModelEntry entry;  // path and settings
    bool from_repository = false;
    bool removed = false;  // its folder went away: dropped from records_
    ModelState state = ModelState::kUnloaded;
    std::string reason;
    std::string fingerprint;  // of the files as last listed
    std::shared_ptr<ServedModel> current;
    uint64_t last_used = 0;
    DeviceBytes measured;  // per device, from its last load: the next load's estimate
    ModelLanguages languages;  // from the folder (its tokenizer files or name), as last listed
    std::vector<Acquired> waiters;  // acquire_async calls waiting for the load under way
  };

  std::shared_ptr<ModelRecord> find_locked(const std::string& name) const;  // throws kNotFound
  void load_locked(const std::shared_ptr<ModelRecord>& record, std::unique_lock<std::mutex>& lock);
  // The one load path (first load and reload), called without the lock: loads the entry's
  // model, timing it and counting the outcome (metrics); *error says why it failed.
  std::shared_ptr<ServedModel> timed_load(const ModelEntry& entry, double* seconds, std::string* error);
  // Makes `model` the record's served version (a previous one retired): its measured memory,
  // state, metrics and the `event` log line.
  void publish_locked(ModelRecord& record, std::shared_ptr<ServedModel> model, double seconds, const char* event);
  void count_loaded_locked();  // the models_loaded gauge
  // load_locked, then the record's acquire_async waiters get its outcome (outside the lock);
  // rethrows a failure.
  void load_and_answer_locked(const std::shared_ptr<ModelRecord>& record, std::unique_lock<std::mutex>& lock);
  std::exception_ptr refusal_locked(const ModelRecord& record) const;  // failed: why, as an error
  // Hands the record's acquire_async waiters the load's outcome, outside the lock.
  void answer_waiters_locked(ModelRecord& record, const std::shared_ptr<ServedModel>& model,
                             const std::exception_ptr& error, std::unique_lock<std::mutex>& lock);
  // Evicts idle models until `need` fits the budget on each of its devices, waiting a while
  // for busy or retiring ones; throws kResourceExhausted.
  void make_room_locked(const ModelRecord& record, const DeviceBytes& need, std::unique_lock<std::mutex>& lock);
  DeviceBytes usage_locked() const;
  void retire_locked(ModelRecord& record, const char* why);
  void reap_locked();  // frees the retired versions no request holds (freed_)
  ModelStatus status_locked(const ModelRecord& record) const;
  std::shared_ptr<ModelRecord> add_repository_record_locked(const std::string& name, const ModelFolder& folder);
  void janitor();

  const ServerConfig config_;
  Metrics& metrics_;
  const size_t budget_bytes_;  // 0 = no budget
  std::map<std::string, ModelEntry> settings_;  // models: entries without a path, by name

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // a load finished, or stopping
  std::map<std::string, std::shared_ptr<ModelRecord>> records_;
  std::string default_name_;
  uint64_t tick_ = 0;  // LRU clock
  // Replaced, evicted or removed versions still held by a request: freed once unheld.
  std::vector<std::shared_ptr<ServedModel>> retired_;
  bool freed_ = false;  // reap_locked freed a version: the janitor gives its memory back
  bool started_ = false;  // the constructor finished (its models: entries loaded)
  bool stopping_ = false;
  int loader_threads_ = 0;  // acquire_async's loads under way (detached; stop() waits)
  std::mutex rescan_mutex_;  // one rescan at a time
  std::thread janitor_;
};

}  // namespace nmt::server
