#pragma once
// The models the server serves: for each entry of the config `workers` Translators on its
// device, a decode loop over each, and the Scheduler whose threads drive the loops.
#include <memory>
#include <string>
#include <vector>

#include "model/decode_loop.h"
#include "model/translator.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/model_languages.h"
#include "server/scheduler.h"

namespace nmt::server {

struct ServedModel {
  std::string name;
  std::string device;     // resolved: cpu | cuda
  std::string precision;  // computed in: float32 on the CPU, else as configured
  bool is_default = false;
  LanguagePair languages;  // from the model folder (server/model_languages.h); may be unknown
  std::vector<std::unique_ptr<Translator>> translators;
  std::vector<std::unique_ptr<DecodeLoop>> loops;  // one per translator
  std::unique_ptr<Scheduler> scheduler;  // declared last: stops before the loops go
  const Tokenizer& tokenizer() const { return translators.front()->tokenizer(); }
};

class ModelRegistry {
 public:
  // Loads every model; throws nmt::Error or std::exception with a one-line reason that
  // names the model.
  ModelRegistry(const ServerConfig& config, Metrics& metrics);
  ~ModelRegistry();

  // "" = the default model (the first of the config); throws Error(kNotFound).
  ServedModel& find(const std::string& name);
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }

  // Finishes queued and decoding work and stops every scheduler (shutdown).
  void stop();

 private:
  Metrics& metrics_;
  std::vector<std::unique_ptr<ServedModel>> models_;
};

}  // namespace nmt::server
