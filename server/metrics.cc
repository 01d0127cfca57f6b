#include "server/metrics.h"

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

const Histogram::BucketBoundaries& batch_buckets() {
  static const Histogram::BucketBoundaries b = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
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
                      .Help("Longest wait of a request's sentences before their batch started")
                      .Register(*registry_)),
      encode_(prometheus::BuildHistogram()
                  .Name("nmt_encode_seconds")
                  .Help("Encoder time per batch")
                  .Register(*registry_)),
      decode_(prometheus::BuildHistogram()
                  .Name("nmt_decode_seconds")
                  .Help("Beam search time per batch")
                  .Register(*registry_)),
      batch_size_(prometheus::BuildHistogram()
                      .Name("nmt_batch_size")
                      .Help("Sentences per batch")
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
                        .Register(*registry_)) {}

std::string Metrics::scrape() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

void Metrics::model_loaded(const std::string& model, const std::string& device, bool loaded) {
  model_loaded_.Add({{"model", model}, {"device", device}}).Set(loaded ? 1 : 0);
  // Every family of the model appears on /metrics from the start, at zero.
  requests_.Add({{"model", model}, {"code", "OK"}});
  request_duration_.Add({{"model", model}}, seconds_buckets());
  queue_wait_.Add({{"model", model}}, seconds_buckets());
  encode_.Add({{"model", model}}, seconds_buckets());
  decode_.Add({{"model", model}}, seconds_buckets());
  batch_size_.Add({{"model", model}}, batch_buckets());
  input_tokens_.Add({{"model", model}});
  output_tokens_.Add({{"model", model}});
  gpu_memory_.Add({{"model", model}, {"device", device}});
}

void Metrics::gpu_memory(const std::string& model, const std::string& device, double bytes) {
  gpu_memory_.Add({{"model", model}, {"device", device}}).Set(bytes);
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

void Metrics::batch(const std::string& model, size_t sentences, const BatchStats& stats) {
  batch_size_.Add({{"model", model}}, batch_buckets()).Observe(static_cast<double>(sentences));
  encode_.Add({{"model", model}}, seconds_buckets()).Observe(stats.encode_seconds);
  decode_.Add({{"model", model}}, seconds_buckets()).Observe(stats.decode_seconds);
}

}  // namespace nmt::server
