// The request pipeline without a network: respond() (n-best, the split-sentence join with
// the text's own whitespace, scores and token ids, failures) from scripted job results;
// record() (metrics counters and the log line); refusals (validation, overload, unknown
// model) and one translation end to end through translate(), against the demo model on the
// CPU. Every wait is on the pipeline's own completion, none on time.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "server/config/config.h"
#include "server/observability/logging.h"
#include "server/observability/metrics.h"
#include "server/observability/trace_context.h"
#include "server/pipeline/request_pipeline.h"
#include "server/repository/model_registry.h"

using namespace nmt;
using namespace nmt::server;

namespace {

const std::string kModelDir = std::string(NMT_REPO_ROOT) + "/models/m30k-en-de-small";

// Loops sized for a few short sentences (the defaults reserve 512 sentences' state).
ServerConfig demo_config(int max_active_rows) {
  return parse_config(R"(
batching:
  max_active_sentences: 8
  max_active_rows: )" + std::to_string(max_active_rows) +
                          R"(
models:
  - name: demo
    path: )" + kModelDir + R"(
    device: cpu
    precision: float32
    workers: 1
)",
                      "/");
}

Hypothesis hyp(std::string text, std::vector<int> ids, float score) {
  Hypothesis h;
  h.text = std::move(text);
  h.ids = std::move(ids);
  h.score = score;
  return h;
}

Translation translation(std::vector<Hypothesis> hypotheses) {
  Translation t;
  t.hypotheses = std::move(hypotheses);
  return t;
}

bool has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

// Log lines written while it lives, as "level message fields".
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out_);
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// A pipeline over the demo model, and translate()'s answer waited for.
struct DemoPipeline {
  explicit DemoPipeline(int max_active_rows = 32, int max_calls = 4096)
      : config(demo_config(max_active_rows)),
        models(config, metrics),
        pipeline(models, config.limits, metrics, max_calls) {}

  std::pair<grpc::Status, v1::TranslateResponse> translate(v1::TranslateRequest request) {
    using Answer = std::pair<grpc::Status, v1::TranslateResponse>;
    auto answer = std::make_shared<std::promise<Answer>>();
    std::future<Answer> answered = answer->get_future();
    int calls = 0;
    pipeline.translate("Test", std::move(request), Clock::time_point::max(),
                       [answer, &calls](const grpc::Status& status, v1::TranslateResponse r) {
                         ++calls;
                         answer->set_value({status, std::move(r)});
                       });
    Answer got = answered.get();
    EXPECT_EQ(calls, 1);
    return got;
  }

  ServerConfig config;
  Metrics metrics;
  ModelRegistry models;
  RequestPipeline pipeline;
};

v1::TranslateRequest request_of(std::vector<std::string> texts) {
  v1::TranslateRequest r;
  for (const std::string& t : texts) r.add_texts(t);
  return r;
}

// A record as submit() leaves it for the demo model.
constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

RequestRecord admitted_record(RequestPipeline& pipeline, int64_t input_tokens) {
  v1::TranslateRequest request;
  request.set_request_id("r-1");
  RequestRecord record = pipeline.begin("Translate", request, kTraceparent);
  record.model = "demo";
  record.input_tokens = input_tokens;
  return record;
}

}  // namespace

TEST(RequestPipelineRespond, NBestWithScoresAndTokenIds) {
  DemoPipeline demo;
  AdmittedRequest admitted;
  admitted.return_scores = true;
  admitted.return_token_ids = true;
  JobResult result;
  result.ok = true;
  result.translations = {
      translation({hyp("Hallo Welt", {7, 8, 0}, -0.25f), hyp("Hallo", {7, 0}, -0.75f)}),
      translation({hyp("Gut", {9, 0}, -0.5f), hyp("Schön", {10, 11, 0}, -1.5f)})};
  result.queue_seconds = 0.002;
  result.decode_seconds = 0.03;
  result.decode_steps = 3;
  RequestRecord record = admitted_record(demo.pipeline, 11);
  v1::TranslateResponse response;
  const grpc::Status status =
      demo.pipeline.respond(admitted, result, Clock::time_point::max(), record, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.request_id(), "r-1");
  EXPECT_EQ(response.model(), "demo");
  ASSERT_EQ(response.translations_size(), 2);
  const v1::Translation& first = response.translations(0);
  ASSERT_EQ(first.hypotheses_size(), 2);
  EXPECT_EQ(first.hypotheses(0).text(), "Hallo Welt");
  EXPECT_FLOAT_EQ(first.hypotheses(0).score(), -0.25f);
  EXPECT_EQ(std::vector<int>(first.hypotheses(0).token_ids().begin(),
                             first.hypotheses(0).token_ids().end()),
            (std::vector<int>{7, 8, 0}));
  EXPECT_EQ(first.hypotheses(1).text(), "Hallo");
  EXPECT_FLOAT_EQ(first.hypotheses(1).score(), -0.75f);
  EXPECT_EQ(first.sentences_size(), 0) << "not split: no per-sentence results";
  const v1::Translation& second = response.translations(1);
  ASSERT_EQ(second.hypotheses_size(), 2);
  EXPECT_EQ(second.hypotheses(1).text(), "Schön");
  EXPECT_EQ(second.hypotheses(1).token_ids_size(), 3);
  // Output tokens count each text's best hypothesis: 3 + 2.
  EXPECT_EQ(response.input_tokens(), 11);
  EXPECT_EQ(response.output_tokens(), 5);
  EXPECT_EQ(record.output_tokens, 5);
  EXPECT_DOUBLE_EQ(response.timings().queue_ms(), 2.0);
  EXPECT_DOUBLE_EQ(response.timings().decode_ms(), 30.0);
  EXPECT_EQ(record.decode_steps, 3);
  const std::string text = demo.metrics.scrape();
  EXPECT_TRUE(has(text, R"(nmt_input_tokens_total{model="demo"} 11)")) << text;
  EXPECT_TRUE(has(text, R"(nmt_output_tokens_total{model="demo"} 5)")) << text;
  EXPECT_TRUE(has(text, R"(nmt_queue_wait_seconds_count{model="demo"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(nmt_decode_seconds_count{model="demo"} 1)")) << text;
}

TEST(RequestPipelineRespond, ScoresAndIdsOnlyWhenAsked) {
  DemoPipeline demo;
  AdmittedRequest admitted;  // neither return_scores nor return_token_ids
  JobResult result;
  result.ok = true;
  result.translations = {translation({hyp("Hallo", {7, 0}, -0.75f)})};
  RequestRecord record = admitted_record(demo.pipeline, 2);
  v1::TranslateResponse response;
  ASSERT_TRUE(
      demo.pipeline.respond(admitted, result, Clock::time_point::max(), record, &response).ok());
  ASSERT_EQ(response.translations(0).hypotheses_size(), 1);
  EXPECT_EQ(response.translations(0).hypotheses(0).text(), "Hallo");
  EXPECT_EQ(response.translations(0).hypotheses(0).score(), 0.f);
  EXPECT_EQ(response.translations(0).hypotheses(0).token_ids_size(), 0);
}

TEST(RequestPipelineRespond, SplitSentencesJoinWithTheTextsOwnWhitespace) {
  DemoPipeline demo;
  AdmittedRequest admitted;
  admitted.return_scores = true;
  // Two texts: " A.  B.\n" (two sentences) and "C." (one).
  SplitText a;
  a.sentences = {"A.", "B."};
  a.gaps = {" ", "  ", "\n"};
  SplitText c;
  c.sentences = {"C."};
  c.gaps = {"", ""};
  admitted.split = {a, c};
  JobResult result;
  result.ok = true;
  result.translations = {translation({hyp("Eins.", {1, 0}, -0.1f), hyp("Ein.", {2, 0}, -0.4f)}),
                         translation({hyp("Zwei.", {3, 4, 0}, -0.2f), hyp("Zwo.", {5, 0}, -0.3f)}),
                         translation({hyp("Drei.", {6, 0}, -0.3f), hyp("Drei", {6, 1, 0}, -0.9f)})};
  RequestRecord record = admitted_record(demo.pipeline, 9);
  v1::TranslateResponse response;
  ASSERT_TRUE(
      demo.pipeline.respond(admitted, result, Clock::time_point::max(), record, &response).ok());
  ASSERT_EQ(response.translations_size(), 2);
  const v1::Translation& first = response.translations(0);
  // The text's translation: each sentence's best, with the text's whitespace around them.
  ASSERT_EQ(first.hypotheses_size(), 1);
  EXPECT_EQ(first.hypotheses(0).text(), " Eins.  Zwei.\n");
  ASSERT_EQ(first.sentences_size(), 2);
  EXPECT_EQ(first.sentences(0).source(), "A.");
  ASSERT_EQ(first.sentences(0).hypotheses_size(), 2);
  EXPECT_EQ(first.sentences(0).hypotheses(1).text(), "Ein.");
  EXPECT_FLOAT_EQ(first.sentences(0).hypotheses(1).score(), -0.4f);
  EXPECT_EQ(first.sentences(1).source(), "B.");
  EXPECT_EQ(first.sentences(1).hypotheses(0).text(), "Zwei.");
  const v1::Translation& second = response.translations(1);
  EXPECT_EQ(second.hypotheses(0).text(), "Drei.");
  ASSERT_EQ(second.sentences_size(), 1);
  EXPECT_EQ(second.sentences(0).source(), "C.");
  // Each sentence's best: 2 + 3 + 2.
  EXPECT_EQ(response.output_tokens(), 7);
}

TEST(RequestPipelineRespond, FailedJobsGiveTheirStatus) {
  DemoPipeline demo;
  AdmittedRequest admitted;
  RequestRecord record = admitted_record(demo.pipeline, 2);
  auto status_of = [&](ErrorCode code, Clock::time_point deadline) {
    JobResult result;
    result.ok = false;
    result.code = code;
    result.message = "scripted failure";
    v1::TranslateResponse response;
    const grpc::Status status =
        demo.pipeline.respond(admitted, result, deadline, record, &response);
    EXPECT_EQ(response.translations_size(), 0);
    return status;
  };
  const grpc::Status exhausted = status_of(ErrorCode::kResourceExhausted, Clock::time_point::max());
  EXPECT_EQ(exhausted.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(exhausted.error_message(), "scripted failure");
  // A cancelled job is the client's cancellation, unless its deadline has passed.
  EXPECT_EQ(status_of(ErrorCode::kCancelled, Clock::time_point::max()).error_code(),
            grpc::StatusCode::CANCELLED);
  EXPECT_EQ(status_of(ErrorCode::kCancelled, Clock::now() - std::chrono::seconds(1)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(status_of(ErrorCode::kInternal, Clock::time_point::max()).error_code(),
            grpc::StatusCode::INTERNAL);
}

TEST(RequestPipelineRecord, TranslatedRequestCountsAndLogsItsScheduling) {
  DemoPipeline demo;
  RequestRecord record = admitted_record(demo.pipeline, 7);
  record.sentences = 2;
  record.output_tokens = 5;
  record.queue_ms = 1.5;
  record.decode_ms = 12.25;
  record.decode_steps = 9;
  CapturedLog log;
  demo.pipeline.record(record, grpc::Status::OK);
  const std::string line = log.text();
  EXPECT_EQ(line.rfind("info request request_id=r-1 traceparent=" + std::string(kTraceparent) +
                           " method=Translate model=demo sentences=2 "
                       "input_tokens=7 output_tokens=5 ms=",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find(" code=OK queue_ms=1.5 decode_ms=12.25 steps=9\n"), std::string::npos)
      << line;
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << "one line per request: " << line;
  const std::string text = demo.metrics.scrape();
  EXPECT_TRUE(has(text, R"(nmt_requests_total{code="OK",model="demo"} 1)")) << text;
  EXPECT_TRUE(has(text, R"(nmt_request_duration_seconds_count{model="demo"} 1)")) << text;
}

TEST(RequestPipelineRecord, UntranslatedRequestHasNoSchedulingFields) {
  DemoPipeline demo;
  RequestRecord record = admitted_record(demo.pipeline, 0);  // decode_steps 0
  CapturedLog log;
  demo.pipeline.record(record, grpc::Status::OK);
  EXPECT_NE(log.text().find(" code=OK\n"), std::string::npos) << log.text();
  EXPECT_EQ(log.text().find("steps="), std::string::npos) << log.text();
}

TEST(RequestPipelineRecord, FailuresLogTheirErrorAtTheirLevel) {
  DemoPipeline demo;
  CapturedLog log;
  RequestRecord refused = admitted_record(demo.pipeline, 0);
  demo.pipeline.record(refused, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full"));
  RequestRecord failed = admitted_record(demo.pipeline, 0);
  demo.pipeline.record(failed, grpc::Status(grpc::StatusCode::INTERNAL, "engine broke"));
  demo.pipeline.record_refused("HTTP /translate",
                               grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no API key"),
                               "00-zz");
  const std::string text = log.text();
  EXPECT_NE(text.find("warning request failed request_id=r-1 traceparent=" + std::string(kTraceparent) +
                      " method=Translate model=demo"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" code=RESOURCE_EXHAUSTED error=\"queue full\"\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("error request failed request_id=r-1"), std::string::npos) << text;
  EXPECT_NE(text.find(" code=INTERNAL error=\"engine broke\"\n"), std::string::npos) << text;
  // A refusal before the pipeline: no model resolved, no sentence counted, an id made here.
  EXPECT_NE(text.find("method=\"HTTP /translate\" model=unknown sentences=0 input_tokens=0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(" code=UNAUTHENTICATED error=\"no API key\"\n"), std::string::npos) << text;
  // Its traceparent was not valid: the line carries a fresh one.
  EXPECT_EQ(text.find("00-zz"), std::string::npos) << text;
  const std::string metrics = demo.metrics.scrape();
  EXPECT_TRUE(has(metrics, R"(nmt_requests_total{code="RESOURCE_EXHAUSTED",model="demo"} 1)"))
      << metrics;
  EXPECT_TRUE(has(metrics, R"(nmt_requests_total{code="INTERNAL",model="demo"} 1)")) << metrics;
  EXPECT_TRUE(has(metrics, R"(nmt_requests_total{code="UNAUTHENTICATED",model="unknown"} 1)"))
      << metrics;
}

// Who a request is (fair queueing's tenant): its key, else its peer without the port, or a
// trusted x-tenant.
TEST(IdentifyCaller, KeyElsePeerOrTrustedHeader) {
  auto key = std::make_shared<ApiKey>();
  key->tenant = "key:team";
  key->weight = 3;
  struct Row {
    std::shared_ptr<const ApiKey> key;
    std::string peer, header;
    bool trust;
    std::string tenant;
    int weight;
  };
  const std::vector<Row> rows = {
      {key, "ipv4:10.0.0.1:5000", "", false, "key:team", 3},
      {nullptr, "ipv4:10.0.0.1:5000", "", false, "peer:10.0.0.1", 1},
      {nullptr, "ipv4:10.0.0.1:6001", "", false, "peer:10.0.0.1", 1},  // another connection, one tenant
      {nullptr, "ipv6:[::1]:5000", "", false, "peer:::1", 1},
      {nullptr, "unix:/run/nmt.sock", "", false, "peer:unix:/run/nmt.sock", 1},
      {nullptr, "192.168.1.2", "", false, "peer:192.168.1.2", 1},  // HTTP's remote address
      {nullptr, "ipv4:10.0.0.1:5000", "acme", false, "peer:10.0.0.1", 1},  // untrusted header: ignored
      {nullptr, "ipv4:10.0.0.1:5000", "acme", true, "tenant:acme", 1},
      {key, "ipv4:10.0.0.1:5000", "acme", true, "tenant:acme", 3},
      {nullptr, "ipv4:10.0.0.1:5000", "", true, "peer:10.0.0.1", 1},
  };
  for (const Row& r : rows) {
    const Caller c = identify_caller(r.key, r.peer, r.header, r.trust);
    EXPECT_EQ(c.tenant, r.tenant) << r.peer << " " << r.header;
    EXPECT_EQ(c.weight, r.weight) << r.peer << " " << r.header;
    EXPECT_EQ(c.key, r.key);
  }
}

TEST(RequestPipelineBegin, KeepsAnEchoableIdAndReplacesOthers) {
  DemoPipeline demo;
  v1::TranslateRequest request = request_of({"a", "b", "c"});
  request.set_request_id("client-7");
  RequestRecord kept = demo.pipeline.begin("Translate", request, kTraceparent);
  EXPECT_EQ(kept.request_id, "client-7");
  EXPECT_EQ(kept.traceparent, kTraceparent);
  EXPECT_TRUE(valid_traceparent(demo.pipeline.begin("Translate", request).traceparent));
  EXPECT_EQ(kept.sentences, 3u);
  EXPECT_EQ(kept.model, "unknown");
  request.set_request_id("bad\nid");
  const std::string made1 = demo.pipeline.begin("Translate", request).request_id;
  const std::string made2 = demo.pipeline.begin("Translate", request).request_id;
  EXPECT_NE(made1, "bad\nid");
  EXPECT_TRUE(valid_request_id(made1)) << made1;
  EXPECT_NE(made1, made2) << "each made id is new";
}

TEST(RequestPipelineTranslate, TranslatesSplitSentencesEndToEnd) {
  DemoPipeline demo;
  v1::TranslateRequest request =
      request_of({"A man is walking.  A dog runs.", "Two children play."});
  request.set_request_id("e2e");
  request.mutable_options()->set_split_sentences(true);
  request.mutable_options()->set_beam_size(2);
  request.mutable_options()->set_num_hypotheses(2);
  request.mutable_options()->set_return_scores(true);
  CapturedLog log;
  auto [status, response] = demo.translate(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.request_id(), "e2e");
  EXPECT_EQ(response.model(), "demo");
  ASSERT_EQ(response.translations_size(), 2);
  const v1::Translation& first = response.translations(0);
  ASSERT_EQ(first.sentences_size(), 2);
  EXPECT_EQ(first.sentences(0).source(), "A man is walking.");
  EXPECT_EQ(first.sentences(1).source(), "A dog runs.");
  for (const v1::SentenceTranslation& s : first.sentences()) {
    ASSERT_EQ(s.hypotheses_size(), 2);
    EXPECT_FALSE(s.hypotheses(0).text().empty());
    EXPECT_GE(s.hypotheses(0).score(), s.hypotheses(1).score()) << "best first";
  }
  EXPECT_EQ(first.hypotheses(0).text(), first.sentences(0).hypotheses(0).text() + "  " +
                                            first.sentences(1).hypotheses(0).text());
  EXPECT_GT(response.input_tokens(), 0);
  EXPECT_GT(response.output_tokens(), 0);
  // Recorded once, with the scheduling of a translated request.
  const std::string text = log.text();
  // A request that brought no traceparent is logged under a fresh one.
  EXPECT_NE(text.find("request request_id=e2e traceparent=00-"), std::string::npos) << text;
  EXPECT_NE(text.find(" method=Test model=demo sentences=3 "), std::string::npos) << text;
  EXPECT_NE(text.find(" code=OK queue_ms="), std::string::npos) << text;
  EXPECT_TRUE(has(demo.metrics.scrape(), R"(nmt_requests_total{code="OK",model="demo"} 1)"));
  EXPECT_TRUE(has(demo.metrics.scrape(), "nmt_inflight_requests 0")) << "the permit is released";
}

// return_alignments with split_sentences: the byte ranges are in the whole request text and
// the joined translation, the token indices in the sentence `sentence` names; the demo model's
// "Hund" comes from "dog".
TEST(RequestPipelineTranslate, AlignmentsAreInTheWholeTexts) {
  DemoPipeline demo;
  const std::string source = "A man is walking.  A dog runs.";
  v1::TranslateRequest request = request_of({source});
  request.mutable_options()->set_split_sentences(true);
  request.mutable_options()->set_return_alignments(true);
  auto [status, response] = demo.translate(request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const v1::Translation& t = response.translations(0);
  ASSERT_EQ(t.sentences_size(), 2);
  const v1::Hypothesis& joined = t.hypotheses(0);
  const std::string& text = joined.text();
  ASSERT_EQ(joined.alignments_size(),
            t.sentences(0).hypotheses(0).alignments_size() + t.sentences(1).hypotheses(0).alignments_size());
  bool dog = false;
  for (const v1::Hypothesis::Alignment& a : joined.alignments()) {
    ASSERT_LE(a.source_begin(), a.source_end());
    ASSERT_LE(a.source_end(), source.size());
    ASSERT_LE(a.target_begin(), a.target_end());
    ASSERT_LE(a.target_end(), text.size());
    // the second sentence's tokens are in its half of both texts
    if (a.sentence() == 1 && a.source_end() > a.source_begin()) EXPECT_GE(a.source_begin(), source.find("A dog"));
    if (a.sentence() == 1 && a.target_end() > a.target_begin()) EXPECT_GT(a.target_begin(), text.find("  "));
    if (text.substr(a.target_begin(), a.target_end() - a.target_begin()) == "Hund") {
      dog = true;
      EXPECT_EQ(source.substr(a.source_begin(), a.source_end() - a.source_begin()), "dog");
    }
  }
  EXPECT_TRUE(dog) << text;
  // Not asked: none.
  request.mutable_options()->set_return_alignments(false);
  auto [plain_status, plain] = demo.translate(request);
  ASSERT_TRUE(plain_status.ok());
  EXPECT_EQ(plain.translations(0).hypotheses(0).alignments_size(), 0);
  EXPECT_EQ(plain.translations(0).hypotheses(0).text(), text);
}

TEST(RequestPipelineRefusals, ValidationErrorsAreInvalidArgument) {
  DemoPipeline demo;
  auto refused = [&](v1::TranslateRequest request, const std::string& says) {
    auto [status, response] = demo.translate(std::move(request));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find(says), std::string::npos) << status.error_message();
    EXPECT_EQ(response.translations_size(), 0);
  };
  refused(request_of({}), "text");
  refused(request_of({"a", ""}), "texts[1]");  // names the empty text
  v1::TranslateRequest beam = request_of({"a"});
  beam.mutable_options()->set_beam_size(demo.config.limits.max_beam_size + 1);
  refused(beam, "beam_size");
  std::string long_text;
  for (int i = 0; i < demo.config.limits.max_input_tokens; ++i) long_text += "word ";
  refused(request_of({long_text}), "max_input_tokens");
  v1::TranslateRequest id = request_of({"a"});
  id.set_request_id("bad\nid");
  refused(id, "request_id");
  const std::string text = demo.metrics.scrape();
  EXPECT_TRUE(has(text, R"(nmt_requests_total{code="INVALID_ARGUMENT",model="demo"} 5)")) << text;
}

TEST(RequestPipelineRefusals, UnknownModelIsNotFound) {
  DemoPipeline demo;
  v1::TranslateRequest request = request_of({"A man."});
  request.set_model("no-such-model");
  auto [status, response] = demo.translate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_NE(status.error_message().find("no-such-model"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(
      has(demo.metrics.scrape(), R"(nmt_requests_total{code="NOT_FOUND",model="unknown"} 1)"));
}

TEST(RequestPipelineRefusals, EveryPermitTakenIsResourceExhausted) {
  DemoPipeline demo(/*max_active_rows=*/32, /*max_calls=*/1);
  {
    CallPermit held(demo.pipeline);
    ASSERT_TRUE(held.acquire());
    EXPECT_TRUE(has(demo.metrics.scrape(), "nmt_inflight_requests 1"));
    auto [status, response] = demo.translate(request_of({"A man."}));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(status.error_message().find("server.max_concurrent_calls"), std::string::npos)
        << status.error_message();
    CallPermit second(demo.pipeline);
    EXPECT_FALSE(second.acquire());
  }
  // The place is free again once the permit is gone.
  auto [status, response] = demo.translate(request_of({"A man."}));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(has(demo.metrics.scrape(), "nmt_inflight_requests 0"));
}

TEST(RequestPipelineRefusals, SentenceThatCanNeverFitIsResourceExhausted) {
  // A loop of 4 KV-cache rows never holds a sentence of beam 8.
  DemoPipeline demo(/*max_active_rows=*/4);
  v1::TranslateRequest request = request_of({"A man."});
  request.mutable_options()->set_beam_size(8);
  auto [status, response] = demo.translate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("max_active_rows"), std::string::npos)
      << status.error_message();
  EXPECT_TRUE(has(demo.metrics.scrape(),
                  R"(nmt_requests_total{code="RESOURCE_EXHAUSTED",model="demo"} 1)"));
}
