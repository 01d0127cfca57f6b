#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/error.h"
#include "server/observability/logging.h"
#include "server/repository/model_folder.h"
#include "server/repository/model_registry.h"

// ModelRegistry::rescan (SIGHUP, ModelControl/Reload): the repository's folders against the
// registry's records. Removed folders retire their models, new ones are added unloaded, and a
// loaded model whose files changed loads its new version beside the old one, swapped in once
// it is ready (docs/server.md, "Model repository").
namespace nmt::server {

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
  std::vector<std::shared_ptr<ModelRecord>> reload;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    for (auto it = records_.begin(); it != records_.end();) {
      ModelRecord& record = *it->second;
      if (!record.from_repository || folders.count(record.name)) {
        ++it;
        continue;
      }
      record.removed = true;  // a load under way discards its result
      retire_locked(record, "removed from the repository");
      report.removed.push_back(record.name);
      it = records_.erase(it);
    }
    for (const auto& [name, record] : records_) {
      std::string missing;
      const std::string fingerprint =
          record->from_repository ? folders.at(name).fingerprint : model_fingerprint(record->entry.path, &missing);
      if (record->from_repository) missing = folders.at(name).missing;
      if (fingerprint == record->fingerprint) continue;
      record->fingerprint = fingerprint;
      // A configured model is always loaded: its version's tokenizer lists its languages.
      if (record->from_repository) record->languages = folders.at(name).languages;
      report.changed.push_back(name);
      if (!missing.empty()) {  // keeps serving what it has; a new load would fail
        record->reason = "missing model files: " + missing;
        if (record->state != ModelState::kLoaded) record->state = ModelState::kFailed;
        report.failed.push_back(name);
      } else if (record->state == ModelState::kLoaded) {
        reload.push_back(record);
      } else if (record->state == ModelState::kFailed) {
        record->state = ModelState::kUnloaded;  // loads on its next request
        record->reason.clear();
      }
    }
    for (const auto& [name, folder] : folders) {
      if (records_.count(name)) continue;
      add_repository_record_locked(name, folder);
      report.added.push_back(name);
    }
  }
  // Changed and loaded: the new version is loaded beside the old one, then swapped in. Under
  // a budget both versions must fit for that moment (the old one's measure estimates the
  // new one): idle models are evicted for it, and when that is not enough the old version
  // keeps serving and the reload is reported failed.
  for (const auto& record : reload) {
    if (record->from_repository && budget_bytes_ > 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      try {
        make_room_locked(*record, record->measured, lock);
      } catch (const Error& e) {
        record->reason = std::string("reload postponed, the previous version still serves: ") +
                       e.what() + " (the new version loads beside it)";
        report.failed.push_back(record->name);
        log_event(spdlog::level::warn, "model reload postponed", {{"model", record->name}, {"error", e.what()}});
        continue;
      }
    }
    double seconds = 0;
    std::string error;
    std::shared_ptr<ServedModel> fresh = timed_load(record->entry, &seconds, &error);
    std::unique_lock<std::mutex> lock(mutex_);
    if (!error.empty()) {
      record->reason = "reload failed, the previous version still serves: " + error;
      report.failed.push_back(record->name);
      log_event(spdlog::level::err, "model reload failed", {{"model", record->name}, {"error", error}});
      continue;
    }
    if (record->removed || record->state != ModelState::kLoaded || stopping_) {
      lock.unlock();
      fresh.reset();
      continue;
    }
    publish_locked(*record, std::move(fresh), seconds, "model reloaded");
  }
  log_event(spdlog::level::info, "model repository rescanned",
            {{"added", report.added}, {"removed", report.removed},
             {"changed", report.changed}, {"failed", report.failed}});
  return report;
}

}  // namespace nmt::server
