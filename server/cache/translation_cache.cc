#include "server/cache/translation_cache.h"

#include <cstring>

namespace nmt::server {
namespace {

template <typename T>
void append(std::string& out, const T& value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// What an entry holds, its bookkeeping included (list node, index slot, strings' headers):
// an estimate that keeps the bound honest for many small entries.
size_t entry_bytes(const std::string& key, const std::string& model, const Translation& t) {
  size_t bytes = 2 * key.size() + model.size() + 160;
  for (const Hypothesis& h : t.hypotheses) bytes += sizeof(Hypothesis) + h.ids.size() * sizeof(int) + h.text.size();
  return bytes;
}

}  // namespace

TranslationCache::TranslationCache(size_t max_bytes, prometheus::Registry* registry) : max_bytes_(max_bytes) {
  if (!registry) return;
  hits_ = &prometheus::BuildCounter()
               .Name("nmt_cache_hits_total")
               .Help("Sentences answered from the translation cache (no decoder step)")
               .Register(*registry)
               .Add({});
  misses_ = &prometheus::BuildCounter()
                 .Name("nmt_cache_misses_total")
                 .Help("Sentences looked up in the translation cache and decoded")
                 .Register(*registry)
                 .Add({});
  evictions_counter_ = &prometheus::BuildCounter()
                            .Name("nmt_cache_evictions_total")
                            .Help("Translation cache entries evicted for room (server.translation_cache_mb)")
                            .Register(*registry)
                            .Add({});
  bytes_gauge_ = &prometheus::BuildGauge()
                      .Name("nmt_cache_bytes")
                      .Help("Bytes the translation cache holds")
                      .Register(*registry)
                      .Add({});
}

std::string TranslationCache::key(uint64_t generation, const DecodeOptions& o, const std::vector<int>& ids) {
  std::string k;
  k.reserve(48 + ids.size() * sizeof(int));
  append(k, generation);
  append(k, o.beam_size);
  append(k, o.num_hypotheses);
  append(k, o.length_penalty);
  append(k, o.max_decoding_length);
  append(k, o.min_decoding_length);
  append(k, o.return_scores);
  append(k, o.forced_bos_id);
  append(k, o.return_alignments);  // a hit must carry them
  // Repetition controls: each sequence's length, then its ids.
  append(k, o.no_repeat_ngram_size);
  append(k, o.repetition_penalty);
  append(k, int(o.suppress_sequences.size()));
  for (const std::vector<int>& seq : o.suppress_sequences) {
    append(k, int(seq.size()));
    for (int id : seq) append(k, id);
  }
  // target_prefix: its length, then its ids (a prefix changes the output).
  append(k, int(o.target_prefix.size()));
  for (int id : o.target_prefix) append(k, id);
  // Sampling: the warpers and the seed (only seeded sampling is cached: cacheable()).
  append(k, o.sampling_topk);
  append(k, o.sampling_topp);
  append(k, o.sampling_temperature);
  append(k, o.has_seed);
  append(k, o.seed);
  // Glossary: the sentence's required phrases themselves (the terms of the entries that apply,
  // a model's glossary.tsv's with them: editing that file reloads the model, a new generation
  // above); none is the plain search's key, whose output it is.
  append(k, int(o.glossary_phrases.size()));
  for (const std::vector<int>& phrase : o.glossary_phrases) {
    append(k, int(phrase.size()));
    for (int id : phrase) append(k, id);
  }
  for (int id : ids) append(k, id);
  return k;
}

std::optional<Translation> TranslationCache::find(const std::string& model, uint64_t generation,
                                                  const std::string& key) {
  if (!enabled()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  forget_older_locked(model, generation);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    if (misses_) misses_->Increment();
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  if (hits_) hits_->Increment();
  return it->second->translation;
}

void TranslationCache::insert(const std::string& model, uint64_t generation, const std::string& key,
                              const Translation& translation) {
  if (!enabled()) return;
  const size_t bytes = entry_bytes(key, model, translation);
  if (bytes > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  forget_older_locked(model, generation);
  if (generation < newest_[model]) return;  // a request of the old version finishing late
  if (const auto it = index_.find(key); it != index_.end()) erase_locked(it->second, false);
  while (bytes_ + bytes > max_bytes_ && !lru_.empty()) erase_locked(std::prev(lru_.end()), true);
  lru_.push_front(Entry{key, model, generation, translation, bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  if (bytes_gauge_) bytes_gauge_->Set(double(bytes_));
}

void TranslationCache::forget_older_locked(const std::string& model, uint64_t generation) {
  uint64_t& newest = newest_[model];
  if (generation <= newest) return;
  newest = generation;
  for (auto it = lru_.begin(); it != lru_.end();) {
    const auto next = std::next(it);
    if (it->model == model && it->generation < generation) erase_locked(it, false);
    it = next;
  }
}

void TranslationCache::erase_locked(std::list<Entry>::iterator it, bool eviction) {
  bytes_ -= it->bytes;
  index_.erase(it->key);
  lru_.erase(it);
  if (eviction) {
    ++evictions_;
    if (evictions_counter_) evictions_counter_->Increment();
  }
  if (bytes_gauge_) bytes_gauge_->Set(double(bytes_));
}

size_t TranslationCache::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

size_t TranslationCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

uint64_t TranslationCache::evictions() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return evictions_;
}

}  // namespace nmt::server
