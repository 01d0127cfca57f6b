#pragma once
// The Prometheus metrics of DESIGN.md §6 in one prometheus-cpp registry; scrape() renders
// the page that MetricsHttpServer serves on server.metrics_host:metrics_port/metrics.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "model/translator.h"

namespace nmt::server {

class Metrics {
 public:
  Metrics();

  // The text exposition format, as /metrics serves it.
  std::string scrape() const;

  void model_loaded(const std::string& model, const std::string& device, bool loaded);
  void gpu_memory(const std::string& model, const std::string& device, double bytes);
  // One finished request (unary call or stream message); `code` as status_code_name().
  void request_done(const std::string& model, const std::string& code, double seconds);
  void tokens(const std::string& model, int64_t input_tokens, int64_t output_tokens);
  void queue_wait(const std::string& model, double seconds);
  void batch(const std::string& model, size_t sentences, const BatchStats& stats);

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

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Histogram>& encode_;
  prometheus::Family<prometheus::Histogram>& decode_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Counter>& input_tokens_;
  prometheus::Family<prometheus::Counter>& output_tokens_;
  prometheus::Gauge& inflight_;
  prometheus::Family<prometheus::Gauge>& gpu_memory_;
  prometheus::Family<prometheus::Gauge>& model_loaded_;
};

}  // namespace nmt::server
