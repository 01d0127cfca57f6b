#pragma once
// One loaded version of a model: a replica per device (each its own Translators, one per
// worker, with a decode loop over each, and the Scheduler whose threads drive the loops).
// Requests go to the least loaded replica. Owned through shared_ptr: a request keeps the
// version it was admitted to alive, so a reload or an eviction never pulls a model from
// under a sentence in flight.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/text/glossary.h"

#include "model/decoding/decode_loop.h"
#include "model/translator.h"
#include "server/config/config.h"
#include "server/observability/metrics.h"
#include "server/repository/model_languages.h"
#include "server/scheduling/scheduler.h"

namespace nmt::server {

struct Replica {
  std::string device;  // "cpu" or "cuda:N" (N in nvidia-smi order)
  std::vector<std::unique_ptr<Translator>> translators;
  std::vector<std::unique_ptr<DecodeLoop>> loops;  // one per translator
  // Measured once the loops reserved their (logical) capacity: what the model holds idle, the
  // budget's measure. The decode state comes and goes with the tokens in flight on top of it
  // (docs/data-flow.md, "Decode-state memory").
  size_t memory_bytes = 0;
  std::unique_ptr<Scheduler> scheduler;  // declared last: stops before the loops go
  // Queued and decoding sentences: what "least loaded" compares.
  size_t load() const { return scheduler->queued_sentences() + size_t(scheduler->active_sentences()); }
};

// A number no other loaded version of any model had before: the translation cache's key
// (server/cache/translation_cache.h), so a reload is never served the old version's output.
uint64_t next_model_generation();

struct ServedModel {
  const uint64_t generation = next_model_generation();
  std::string name;
  std::string path;
  std::string device;     // resolved kind: cpu | cuda
  std::string precision;  // computed in (Translator::precision)
  bool is_default = false;
  // A multilingual model's codes from its tokenizer, a bilingual one's pair from its folder
  // (server/repository/model_languages.h); may be unknown.
  ModelLanguages languages;
  // glossary.tsv in the model's folder, read at load (a changed file reloads the model on
  // SIGHUP: its fingerprint, model_folder.h); empty when there is none.
  std::vector<GlossaryEntry> glossary;
  std::vector<std::unique_ptr<Replica>> replicas;

  ~ServedModel() { stop(); }
  const Tokenizer& tokenizer() const { return replicas.front()->translators.front()->tokenizer(); }
  int vocab_size() const { return tokenizer().vocab_size(); }
  // The replica with the fewest queued + active sentences (ties: rotating).
  Replica& least_loaded();
  // No replica holds a queued or active sentence.
  bool idle() const;
  // Finishes queued and decoding work and stops every scheduler. Idempotent.
  void stop();
  size_t memory_bytes() const;
  std::vector<std::string> devices() const;

 private:
  std::atomic<unsigned> next_{0};
};

// The GPUs (nvidia-smi order) an entry's replicas run on; {-1} = one replica on the CPU.
// Throws nmt::Error naming the setting when a listed GPU is not visible.
std::vector<int> replica_devices(const ModelEntry& entry);

// Loads `entry` (its path, device(s), precision, workers) and starts its decode loops.
// Throws std::runtime_error with a one-line reason that names the model.
std::shared_ptr<ServedModel> load_served_model(const ModelEntry& entry, const ServerConfig& config,
                                               Metrics& metrics);

}  // namespace nmt::server
