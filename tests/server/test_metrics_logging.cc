// Metrics families and their labels as /metrics shows them; log line rendering (text and
// JSON); status code mapping; loadgen percentiles.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/loadgen/latency_stats.h"
#include "server/logging.h"
#include "server/metrics.h"
#include "server/status.h"

using namespace nmt::server;

TEST(Metrics, EveryFamilyIsExposedOnceAModelIsLoaded) {
  Metrics m;
  m.model_loaded("m30k", "cpu", true);
  const std::string text = m.scrape();
  for (const char* family :
       {"nmt_requests_total", "nmt_request_duration_seconds", "nmt_queue_wait_seconds",
        "nmt_encode_seconds", "nmt_decode_seconds", "nmt_batch_size", "nmt_input_tokens_total",
        "nmt_output_tokens_total", "nmt_inflight_requests", "nmt_gpu_memory_bytes",
        "nmt_model_loaded"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_NE(text.find("nmt_model_loaded{device=\"cpu\",model=\"m30k\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("nmt_request_duration_seconds_bucket{model=\"m30k\",le=\"0.001\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_request_duration_seconds_bucket{model=\"m30k\",le=\"10\"} 0"), std::string::npos);
}

TEST(Metrics, ObservationsLandInTheirSeries) {
  Metrics m;
  m.model_loaded("m", "cpu", true);
  m.request_done("m", "OK", 0.02);
  m.request_done("m", "OK", 0.3);
  m.request_done("m", "INVALID_ARGUMENT", 0.0001);
  m.tokens("m", 12, 15);
  nmt::BatchStats stats;
  stats.encode_seconds = 0.004;
  stats.decode_seconds = 0.04;
  m.batch("m", 5, stats);
  {
    Metrics::Inflight in(m.inflight_gauge());
    EXPECT_NE(m.scrape().find("nmt_inflight_requests 1"), std::string::npos);
  }
  const std::string text = m.scrape();
  EXPECT_NE(text.find("nmt_requests_total{code=\"OK\",model=\"m\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("nmt_requests_total{code=\"INVALID_ARGUMENT\",model=\"m\"} 1"), std::string::npos);
  EXPECT_NE(text.find("nmt_request_duration_seconds_count{model=\"m\"} 3"), std::string::npos);
  EXPECT_NE(text.find("nmt_request_duration_seconds_bucket{model=\"m\",le=\"0.025\"} 2"), std::string::npos);
  EXPECT_NE(text.find("nmt_input_tokens_total{model=\"m\"} 12"), std::string::npos);
  EXPECT_NE(text.find("nmt_output_tokens_total{model=\"m\"} 15"), std::string::npos);
  EXPECT_NE(text.find("nmt_batch_size_bucket{model=\"m\",le=\"4\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_batch_size_bucket{model=\"m\",le=\"8\"} 1"), std::string::npos);
  EXPECT_NE(text.find("nmt_inflight_requests 0"), std::string::npos);
}

TEST(Logging, TextAndJsonRendering) {
  nlohmann::ordered_json fields = {{"request_id", "r-1"}, {"sentences", 3}, {"code", "OK"},
                                   {"error", "texts[0] is empty"}};
  EXPECT_EQ(render_event(false, "request", fields),
            "request request_id=r-1 sentences=3 code=OK error=\"texts[0] is empty\"");
  const std::string json = "{" + render_event(true, "request", fields) + "}";
  const auto parsed = nlohmann::json::parse(json);
  EXPECT_EQ(parsed["msg"], "request");
  EXPECT_EQ(parsed["request_id"], "r-1");
  EXPECT_EQ(parsed["sentences"], 3);
  EXPECT_EQ(parsed["error"], "texts[0] is empty");
  // Invalid UTF-8 in a message still yields valid JSON.
  EXPECT_NO_THROW(nlohmann::json::parse("{" + render_event(true, "bad \xff", {}) + "}"));
}

TEST(Status, ErrorCodesMapToGrpc) {
  using nmt::ErrorCode;
  EXPECT_EQ(to_grpc_code(ErrorCode::kInvalidArgument), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(to_grpc_code(ErrorCode::kNotFound), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(to_grpc_code(ErrorCode::kResourceExhausted), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(to_grpc_code(ErrorCode::kCancelled), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(to_grpc_code(ErrorCode::kDeadlineExceeded), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(to_grpc_code(ErrorCode::kInternal), grpc::StatusCode::INTERNAL);
  EXPECT_STREQ(status_code_name(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(status_code_name(grpc::StatusCode::OK), "OK");
}

TEST(LoadgenStats, NearestRankPercentiles) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  const auto s = nmt::loadgen::summarize(samples);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p90, 90);
  EXPECT_DOUBLE_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(nmt::loadgen::percentile({7}, 99), 7);
  EXPECT_EQ(nmt::loadgen::summarize({}).count, 0u);
}
