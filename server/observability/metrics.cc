#include "server/observability/metrics.h"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace nmt::server {
namespace {

using prometheus::Histogram;

// Latency buckets from 1 ms to 10 s.
const Histogram::BucketBoundaries& seconds_buckets() {
  static const Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
  return b;
}

// One decoder step of a loop: from 0.1 ms (a small model's step on the GPU) to 1 s.
const Histogram::BucketBoundaries& step_buckets() {
  static const Histogram::BucketBoundaries b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                0.005,  0.01,    0.025,  0.05,  0.1,
                                                0.25,   0.5,     1.0};
  return b;
}

// Submission to the end of a sentence's first step: from 0.5 ms to 10 s.
const Histogram::BucketBoundaries& first_step_buckets() {
  static const Histogram::BucketBoundaries b = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                0.025,  0.05,  0.1,    0.25,  0.5,
                                                1.0,    2.5,   5.0,    10.0};
  return b;
}

// Sentences admitted into a loop between two steps.
const Histogram::BucketBoundaries& admitted_buckets() {
  static const Histogram::BucketBoundaries b = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256};
  return b;
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("nmt_requests_total")
                    .Help("Finished requests (unary calls and stream messages) by model and gRPC status code")
                    .Register(*registry_)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("nmt_request_duration_seconds")
                            .Help("Server-side request latency, receipt to response")
                            .Register(*registry_)),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("nmt_queue_wait_seconds")
                      .Help("Longest wait of a request's sentences before a decode loop admitted them")
                      .Register(*registry_)),
      encode_(prometheus::BuildHistogram()
                  .Name("nmt_encode_seconds")
                  .Help("Encoder time of an admission into an idle decode loop (into a decoding loop the encode rides on a step and counts in its duration)")
                  .Register(*registry_)),
      decode_(prometheus::BuildHistogram()
                  .Name("nmt_decode_seconds")
                  .Help("Decoding time per request, its first sentence's admission to its last sentence's end")
                  .Register(*registry_)),
      active_rows_(prometheus::BuildGauge()
                       .Name("nmt_active_rows")
                       .Help("KV-cache rows (sentences x beam) a decode loop used in its last step")
                       .Register(*registry_)),
      active_sentences_(prometheus::BuildGauge()
                            .Name("nmt_active_sentences")
                            .Help("Sentences a decode loop decoded in its last step")
                            .Register(*registry_)),
      admitted_sentences_(prometheus::BuildHistogram()
                              .Name("nmt_admitted_sentences")
                              .Help("Sentences a decode loop admitted and encoded with a step (steps with admissions only)")
                              .Register(*registry_)),
      step_duration_(prometheus::BuildHistogram()
                         .Name("nmt_step_duration_seconds")
                         .Help("Duration of one decoder step of a decode loop (with newcomers' encode when it rode on the step; an idle loop's encode excluded)")
                         .Register(*registry_)),
      first_step_(prometheus::BuildHistogram()
                      .Name("nmt_time_to_first_step_seconds")
                      .Help("Submission of a sentence to the end of its first decoder step")
                      .Register(*registry_)),
      input_tokens_(prometheus::BuildCounter()
                        .Name("nmt_input_tokens_total")
                        .Help("Source tokens of successful requests, </s> included")
                        .Register(*registry_)),
      output_tokens_(prometheus::BuildCounter()
                         .Name("nmt_output_tokens_total")
                         .Help("Generated tokens of the best hypotheses of successful requests, EOS included")
                         .Register(*registry_)),
      inflight_(prometheus::BuildGauge()
                    .Name("nmt_inflight_requests")
                    .Help("Requests being served now")
                    .Register(*registry_)
                    .Add({})),
      gpu_memory_(prometheus::BuildGauge()
                      .Name("nmt_gpu_memory_bytes")
                      .Help("Device memory held by a model's engine (0 on the CPU)")
                      .Register(*registry_)),
      model_loaded_(prometheus::BuildGauge()
                        .Name("nmt_model_loaded")
                        .Help("1 when the model is loaded and serving on the device")
                        .Register(*registry_)),
      model_loads_(prometheus::BuildCounter()
                       .Name("nmt_model_loads_total")
                       .Help("Loads and reloads of a model, by result (ok | failed)")
                       .Register(*registry_)),
      model_load_duration_(prometheus::BuildHistogram()
                               .Name("nmt_model_load_seconds")
                               .Help("Time to load a model: files, engines, decode state")
                               .Register(*registry_)),
      model_evictions_(prometheus::BuildCounter()
                           .Name("nmt_model_evictions_total")
                           .Help("Idle models unloaded to fit model_repository.memory_budget_mb")
                           .Register(*registry_)),
      models_loaded_(prometheus::BuildGauge()
                         .Name("nmt_models_loaded")
                         .Help("Models loaded now")
                         .Register(*registry_)
                         .Add({})),
      queue_refusals_(prometheus::BuildCounter()
                          .Name("nmt_queue_refusals_total")
                          .Help("Requests refused RESOURCE_EXHAUSTED by a model's queue (the tenant's "
                                "batching.tenant_queue_share, or max_queue_sentences), by API key")
                          .Register(*registry_)),
      http_connections_(prometheus::BuildGauge()
                            .Name("nmt_http_connections")
                            .Help("Open connections of an HTTP server (api: http.port; metrics: /metrics)")
                            .Register(*registry_)) {
  queue_refusals_.Add({{"key", "none"}});
}

std::string Metrics::scrape() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

void Metrics::model_loaded(const std::string& model, const std::string& device, bool loaded,
                           int loops) {
  model_loaded_.Add({{"model", model}, {"device", device}}).Set(loaded ? 1 : 0);
  // Every family of the model appears on /metrics from the start, at zero.
  requests_.Add({{"model", model}, {"code", "OK"}});
  request_duration_.Add({{"model", model}}, seconds_buckets());
  queue_wait_.Add({{"model", model}}, seconds_buckets());
  encode_.Add({{"model", model}}, seconds_buckets());
  decode_.Add({{"model", model}}, seconds_buckets());
  admitted_sentences_.Add({{"model", model}}, admitted_buckets());
  step_duration_.Add({{"model", model}}, step_buckets());
  first_step_.Add({{"model", model}}, first_step_buckets());
  for (int loop = 0; loop < loops; ++loop) {
    active_rows_.Add({{"model", model}, {"loop", std::to_string(loop)}});
    active_sentences_.Add({{"model", model}, {"loop", std::to_string(loop)}});
  }
  input_tokens_.Add({{"model", model}});
  output_tokens_.Add({{"model", model}});
  gpu_memory_.Add({{"model", model}, {"device", device}});
}

void Metrics::gpu_memory(const std::string& model, const std::string& device, double bytes) {
  gpu_memory_.Add({{"model", model}, {"device", device}}).Set(bytes);
}

namespace {
const prometheus::Histogram::BucketBoundaries& load_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                                  5,    10,  30,   60,  120};
  return buckets;
}
}  // namespace

void Metrics::model_listed(const std::string& model) {
  model_loads_.Add({{"model", model}, {"result", "ok"}});
  model_loads_.Add({{"model", model}, {"result", "failed"}});
  model_load_duration_.Add({{"model", model}}, load_buckets());
  model_evictions_.Add({{"model", model}});
}

void Metrics::model_load(const std::string& model, bool ok, double seconds) {
  model_loads_.Add({{"model", model}, {"result", ok ? "ok" : "failed"}}).Increment();
  model_load_duration_.Add({{"model", model}}, load_buckets()).Observe(seconds);
}

void Metrics::model_evicted(const std::string& model) {
  model_evictions_.Add({{"model", model}}).Increment();
}

void Metrics::models_loaded(double count) { models_loaded_.Set(count); }

void Metrics::queue_refusal(const std::string& key_label) {
  queue_refusals_.Add({{"key", key_label}}).Increment();
}

prometheus::Gauge& Metrics::http_connections(const std::string& server) {
  return http_connections_.Add({{"server", server}});
}

void Metrics::request_done(const std::string& model, const std::string& code, double seconds) {
  requests_.Add({{"model", model}, {"code", code}}).Increment();
  request_duration_.Add({{"model", model}}, seconds_buckets()).Observe(seconds);
}

void Metrics::tokens(const std::string& model, int64_t input_tokens, int64_t output_tokens) {
  input_tokens_.Add({{"model", model}}).Increment(static_cast<double>(input_tokens));
  output_tokens_.Add({{"model", model}}).Increment(static_cast<double>(output_tokens));
}

void Metrics::queue_wait(const std::string& model, double seconds) {
  queue_wait_.Add({{"model", model}}, seconds_buckets()).Observe(seconds);
}

void Metrics::decode_time(const std::string& model, double seconds) {
  decode_.Add({{"model", model}}, seconds_buckets()).Observe(seconds);
}

Metrics::Loop Metrics::loop(const std::string& model, int loop) {
  const prometheus::Labels labels = {{"model", model}, {"loop", std::to_string(loop)}};
  return Loop(active_rows_.Add(labels), active_sentences_.Add(labels),
              admitted_sentences_.Add({{"model", model}}, admitted_buckets()),
              encode_.Add({{"model", model}}, seconds_buckets()),
              step_duration_.Add({{"model", model}}, step_buckets()),
              first_step_.Add({{"model", model}}, first_step_buckets()));
}

void Metrics::Loop::step(int active_rows, int active_sentences, int admitted, double step_seconds,
                         double encode_seconds) {
  rows_.Set(active_rows);
  sentences_.Set(active_sentences);
  if (active_sentences == 0) return;  // the loop went idle: no step ran
  if (admitted > 0) admitted_.Observe(admitted);
  if (encode_seconds > 0) encode_.Observe(encode_seconds);
  step_.Observe(step_seconds);
}

}  // namespace nmt::server
