// Metrics families and their labels as /metrics shows them; log line rendering (text and
// JSON); status code mapping; loadgen percentiles.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "server/pipeline/status.h"
#include "server/observability/logging.h"
#include "server/observability/metrics.h"
#include "tools/loadgen/latency_stats.h"

using namespace nmt::server;

TEST(Metrics, EveryFamilyIsExposedOnceAModelIsLoaded) {
  Metrics m;
  m.model_loaded("m30k", "cpu", true, /*loops=*/2);
  m.model_listed("m30k");
  const std::string text = m.scrape();
  for (const auto& [family, type] : std::vector<std::pair<std::string, std::string>>{
           {"nmt_requests_total", "counter"},
           {"nmt_request_duration_seconds", "histogram"},
           {"nmt_queue_wait_seconds", "histogram"},
           {"nmt_encode_seconds", "histogram"},
           {"nmt_decode_seconds", "histogram"},
           {"nmt_active_rows", "gauge"},
           {"nmt_active_sentences", "gauge"},
           {"nmt_admitted_sentences", "histogram"},
           {"nmt_step_duration_seconds", "histogram"},
           {"nmt_time_to_first_step_seconds", "histogram"},
           {"nmt_input_tokens_total", "counter"},
           {"nmt_output_tokens_total", "counter"},
           {"nmt_inflight_requests", "gauge"},
           {"nmt_gpu_memory_bytes", "gauge"},
           {"nmt_model_loaded", "gauge"},
           {"nmt_models_loaded", "gauge"},
           {"nmt_model_loads_total", "counter"},
           {"nmt_model_load_seconds", "histogram"},
           {"nmt_model_evictions_total", "counter"}}) {
    EXPECT_NE(text.find("# TYPE " + family + " " + type + "\n"), std::string::npos) << family;
  }
  EXPECT_EQ(text.find("nmt_batch_size"), std::string::npos) << "whole-batch metric is gone";
  // Every loop's gauges exist from the start, at zero.
  for (const char* loop : {"0", "1"}) {
    for (const char* gauge : {"nmt_active_rows", "nmt_active_sentences"}) {
      const std::string series =
          std::string(gauge) + "{loop=\"" + loop + "\",model=\"m30k\"} 0\n";
      EXPECT_NE(text.find(series), std::string::npos) << series << text;
    }
  }
  EXPECT_NE(text.find("nmt_step_duration_seconds_bucket{model=\"m30k\",le=\"0.0001\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_step_duration_seconds_bucket{model=\"m30k\",le=\"1\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_time_to_first_step_seconds_bucket{model=\"m30k\",le=\"0.0005\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_time_to_first_step_seconds_bucket{model=\"m30k\",le=\"10\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_admitted_sentences_bucket{model=\"m30k\",le=\"0\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_admitted_sentences_bucket{model=\"m30k\",le=\"256\"} 0"), std::string::npos);
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
  m.decode_time("m", 0.04);
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
  EXPECT_NE(text.find("nmt_decode_seconds_count{model=\"m\"} 1"), std::string::npos);
  EXPECT_NE(text.find("nmt_decode_seconds_bucket{model=\"m\",le=\"0.025\"} 0"), std::string::npos);
  EXPECT_NE(text.find("nmt_decode_seconds_bucket{model=\"m\",le=\"0.05\"} 1"), std::string::npos);
  EXPECT_NE(text.find("nmt_inflight_requests 0"), std::string::npos);
}

TEST(Metrics, DecodeLoopSteps) {
  Metrics m;
  m.model_loaded("m", "cpu", true, /*loops=*/2);
  // Loop 0: 5 sentences admitted (3 ms to encode) before a step over 20 rows, then a step
  // without admissions; loop 1: one step with 1 sentence admitted, then it goes idle.
  Metrics::Loop loop0 = m.loop("m", 0), loop1 = m.loop("m", 1);
  loop0.step(20, 5, 5, 0.0004, 0.003);
  loop0.step(24, 6, 0, 0.002, 0);
  loop1.step(4, 1, 1, 0.0003, 0.001);
  loop1.step(0, 0, 0, 0, 0);
  loop0.first_step(0.004);
  loop1.first_step(0.2);
  const std::string text = m.scrape();
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\n" << text;
  };
  // Gauges hold each loop's last step.
  has(R"(nmt_active_rows{loop="0",model="m"} 24)");
  has(R"(nmt_active_sentences{loop="0",model="m"} 6)");
  has(R"(nmt_active_rows{loop="1",model="m"} 0)");
  has(R"(nmt_active_sentences{loop="1",model="m"} 0)");
  // Admissions only when a step had any: 5 and 1.
  has(R"(nmt_admitted_sentences_count{model="m"} 2)");
  has(R"(nmt_admitted_sentences_sum{model="m"} 6)");
  has(R"(nmt_admitted_sentences_bucket{model="m",le="0"} 0)");
  has(R"(nmt_admitted_sentences_bucket{model="m",le="1"} 1)");
  has(R"(nmt_admitted_sentences_bucket{model="m",le="4"} 1)");
  has(R"(nmt_admitted_sentences_bucket{model="m",le="8"} 2)");
  // Three steps ran (the idle report is not a step): 0.3 ms, 0.4 ms, 2 ms.
  has(R"(nmt_step_duration_seconds_count{model="m"} 3)");
  has(R"(nmt_step_duration_seconds_bucket{model="m",le="0.00025"} 0)");
  has(R"(nmt_step_duration_seconds_bucket{model="m",le="0.0005"} 2)");
  has(R"(nmt_step_duration_seconds_bucket{model="m",le="0.001"} 2)");
  has(R"(nmt_step_duration_seconds_bucket{model="m",le="0.0025"} 3)");
  // Encode time once per admission: 3 ms and 1 ms.
  has(R"(nmt_encode_seconds_count{model="m"} 2)");
  has(R"(nmt_encode_seconds_bucket{model="m",le="0.001"} 1)");
  has(R"(nmt_encode_seconds_bucket{model="m",le="0.005"} 2)");
  // Time to first step.
  has(R"(nmt_time_to_first_step_seconds_count{model="m"} 2)");
  has(R"(nmt_time_to_first_step_seconds_bucket{model="m",le="0.0025"} 0)");
  has(R"(nmt_time_to_first_step_seconds_bucket{model="m",le="0.005"} 1)");
  has(R"(nmt_time_to_first_step_seconds_bucket{model="m",le="0.25"} 2)");
  // Nothing here is a request.
  has(R"(nmt_decode_seconds_count{model="m"} 0)");
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

TEST(Metrics, ModelRepositorySeries) {
  Metrics m;
  m.model_listed("opus-mt-en-de");
  std::string text = m.scrape();
  EXPECT_NE(text.find("nmt_model_loads_total{model=\"opus-mt-en-de\",result=\"ok\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nmt_model_evictions_total{model=\"opus-mt-en-de\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nmt_models_loaded 0\n"), std::string::npos) << text;
  m.model_load("opus-mt-en-de", true, 0.3);
  m.model_load("opus-mt-en-de", false, 0.01);
  m.model_evicted("opus-mt-en-de");
  m.models_loaded(2);
  text = m.scrape();
  EXPECT_NE(text.find("nmt_model_loads_total{model=\"opus-mt-en-de\",result=\"ok\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nmt_model_loads_total{model=\"opus-mt-en-de\",result=\"failed\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nmt_model_evictions_total{model=\"opus-mt-en-de\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nmt_model_load_seconds_bucket{model=\"opus-mt-en-de\",le=\"0.5\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nmt_model_load_seconds_bucket{model=\"opus-mt-en-de\",le=\"0.05\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nmt_models_loaded 2\n"), std::string::npos);
}
