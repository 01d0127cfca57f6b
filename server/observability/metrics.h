#pragma once
// The Prometheus metrics of docs/server.md ("Observability") in one prometheus-cpp registry; scrape() renders
// the page that MetricsEndpoint serves on server.metrics_host:metrics_port/metrics.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <string>

namespace nmt::server {

class Metrics {
 public:
  Metrics();

  // The text exposition format, as /metrics serves it.
  std::string scrape() const;

  // Also shows every family of the model at zero, with the gauges of its `loops` decode
  // loops (models[].workers).
  void model_loaded(const std::string& model, const std::string& device, bool loaded,
                    int loops = 1);
  void gpu_memory(const std::string& model, const std::string& device, double bytes);
  // The model registry: one load (or reload) of a model and how long it took, an eviction
  // (to fit model_repository.memory_budget_mb), and how many models are loaded now.
  // model_listed() shows a model's load and eviction series at zero from when it is known.
  void model_listed(const std::string& model);
  void model_load(const std::string& model, bool ok, double seconds);
  void model_evicted(const std::string& model);
  void models_loaded(double count);
  // One finished request (unary call or stream message); `code` as status_code_name().
  void request_done(const std::string& model, const std::string& code, double seconds);
  void tokens(const std::string& model, int64_t input_tokens, int64_t output_tokens);
  void queue_wait(const std::string& model, double seconds);
  // Per request: from its first sentence's admission to its last sentence's end.
  void decode_time(const std::string& model, double seconds);

  // The series of decode loop `loop` (0-based) of a model, looked up once: a decoder step
  // updates them without building label sets (about 1 us a step, on the loop's thread,
  // where it delays the next step).
  class Loop {
   public:
    // One decoder step: the rows and sentences it held (gauges nmt_active_rows /
    // nmt_active_sentences{model,loop}), the sentences admitted and encoded with it
    // (observed when there were any), its duration, and an idle loop's encode before it
    // (observed when > 0; a decoding loop's encode rides on the step). A loop that goes idle
    // reports 0 rows and 0 sentences: the gauges drop to 0 and nothing is observed.
    void step(int active_rows, int active_sentences, int admitted, double step_seconds,
              double encode_seconds);
    // A sentence's first decoder step ended this long after its request was submitted.
    void first_step(double seconds) { first_step_.Observe(seconds); }

   private:
    friend class Metrics;
    Loop(prometheus::Gauge& rows, prometheus::Gauge& sentences, prometheus::Histogram& admitted,
         prometheus::Histogram& encode, prometheus::Histogram& step, prometheus::Histogram& first_step)
        : rows_(rows), sentences_(sentences), admitted_(admitted), encode_(encode), step_(step),
          first_step_(first_step) {}
    prometheus::Gauge& rows_;
    prometheus::Gauge& sentences_;
    prometheus::Histogram& admitted_;
    prometheus::Histogram& encode_;
    prometheus::Histogram& step_;
    prometheus::Histogram& first_step_;
  };
  Loop loop(const std::string& model, int loop);

  // Counts a request in flight for its lifetime.
  class Inflight {
   public:
    explicit Inflight(prometheus::Gauge& gauge) : gauge_(gauge) { gauge_.Increment(); }
    ~Inflight() { gauge_.Decrement(); }
    Inflight(const Inflight&) = delete;
    Inflight& operator=(const Inflight&) = delete;

   private:
    prometheus::Gauge& gauge_;
  };
  prometheus::Gauge& inflight_gauge() { return inflight_; }
  // A request a model's queue refused RESOURCE_EXHAUSTED (its tenant's share of
  // batching.max_queue_sentences, or the whole queue full), by its API key's label (as the
  // quota metrics: the key's name, "other", "none" without authentication): bounded labels,
  // where a tenant may be any peer address or x-tenant value.
  void queue_refusal(const std::string& key_label);
  // The open connections of an HTTP server ("api": http.port, "metrics": /metrics).
  prometheus::Gauge& http_connections(const std::string& server);
  // For the families of optional parts (the HTTP API's), registered when they start.
  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Histogram>& encode_;
  prometheus::Family<prometheus::Histogram>& decode_;
  prometheus::Family<prometheus::Gauge>& active_rows_;
  prometheus::Family<prometheus::Gauge>& active_sentences_;
  prometheus::Family<prometheus::Histogram>& admitted_sentences_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Histogram>& first_step_;
  prometheus::Family<prometheus::Counter>& input_tokens_;
  prometheus::Family<prometheus::Counter>& output_tokens_;
  prometheus::Gauge& inflight_;
  prometheus::Family<prometheus::Gauge>& gpu_memory_;
  prometheus::Family<prometheus::Gauge>& model_loaded_;
  prometheus::Family<prometheus::Counter>& model_loads_;
  prometheus::Family<prometheus::Histogram>& model_load_duration_;
  prometheus::Family<prometheus::Counter>& model_evictions_;
  prometheus::Gauge& models_loaded_;
  prometheus::Family<prometheus::Counter>& queue_refusals_;
  prometheus::Family<prometheus::Gauge>& http_connections_;
};

}  // namespace nmt::server
