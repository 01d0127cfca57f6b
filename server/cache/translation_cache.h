#pragma once
// Translated sentences kept for repeats (server.translation_cache_mb; docs/server.md,
// "Fairness, quotas and the cache"): UI strings, headers and boilerplate come back again and
// again. Keyed by the model's loaded version (ServedModel::generation, so a reload or an
// eviction and load never serves the old version's output), every DecodeOptions field (all of
// them shape the output) and the sentence's source token ids, which are the normalised
// sentence: what the tokenizer makes of it after splitting, so that texts that tokenize
// alike share an entry and a paragraph with one new sentence decodes only that one. A hit is
// the miss's Translation as the decode loop produced it (ids, text, scores bit for bit), and
// costs no decoder step. Least recently used entries go first once the entries' bytes (keys,
// ids, texts and bookkeeping) pass the bound; a model's entries of an older version go as
// soon as a newer one is seen. An unseeded sampled sentence is never kept (cacheable()). Metrics: nmt_cache_hits_total, nmt_cache_misses_total,
// nmt_cache_evictions_total, nmt_cache_bytes. Safe from any thread (one lock, held for a
// lookup or an insert).
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/decoding/decode_options.h"
#include "model/translator.h"

namespace nmt::server {

class TranslationCache {
 public:
  // max_bytes 0: nothing is kept (every lookup a miss). Metrics when `registry` is given.
  explicit TranslationCache(size_t max_bytes, prometheus::Registry* registry = nullptr);

  // The key of one sentence of a model's version.
  static std::string key(uint64_t generation, const DecodeOptions& options, const std::vector<int>& source_ids);
  // Whether a sentence decoded with these options may be kept: not an unseeded sampled one,
  // whose output is drawn afresh each time.
  static bool cacheable(const DecodeOptions& options) { return !(options.samples() && !options.has_seed); }

  // The translation kept for `key`, made most recently used; counts a hit or a miss.
  std::optional<Translation> find(const std::string& model, uint64_t generation, const std::string& key);
  // Keeps `translation` for `key` (replacing one kept), evicting the least recently used
  // entries to stay within the bound; one larger than the bound is not kept.
  void insert(const std::string& model, uint64_t generation, const std::string& key, const Translation& translation);

  size_t bytes() const;
  size_t entries() const;
  uint64_t evictions() const;
  bool enabled() const { return max_bytes_ > 0; }

 private:
  struct Entry {
    std::string key;
    std::string model;
    uint64_t generation;
    Translation translation;
    size_t bytes;
  };
  void forget_older_locked(const std::string& model, uint64_t generation);
  void erase_locked(std::list<Entry>::iterator it, bool eviction);

  const size_t max_bytes_;
  prometheus::Counter* hits_ = nullptr;
  prometheus::Counter* misses_ = nullptr;
  prometheus::Counter* evictions_counter_ = nullptr;
  prometheus::Gauge* bytes_gauge_ = nullptr;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::unordered_map<std::string, uint64_t> newest_;  // each model's newest version seen
  size_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace nmt::server
