// The real nmt-server on a loopback port, driven by the generated C++ stub: translations
// equal the in-process engine's, n-best, every bad input with its status and message,
// deadlines, client cancellation, 32 concurrent clients, the stream, health, and /metrics
// counters that match the requests sent.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "model/translator.h"
#include "nmt/v1/translation.grpc.pb.h"
#include "tests/server/support/loopback_server.h"
#include "tests/server/support/test_sentences.h"
#include "tools/loadgen/sentence_source.h"

namespace fs = std::filesystem;
using nmt::test::metric_value;
using std::chrono::milliseconds;

namespace {

const std::string kModelDir = std::string(NMT_REPO_ROOT) + "/models/m30k-en-de-small";
constexpr int kMaxCharacters = 4000, kMaxInputTokens = 48, kMaxBeam = 8, kMaxLength = 128;

using nmt::test::sentences;

class ServerTest : public ::testing::Test {
 protected:
  // Not ASSERT, and no exception out of here: gtest turns a fatal failure in SetUpTestSuite
  // into "[  SKIPPED ]" for every test of the suite, which ctest counts as skipped. A failure
  // (a free port, the demo model's load) is kept for SetUp() to fail each test with.
  static void SetUpTestSuite() {
    try {
      start();
    } catch (const std::exception& e) {
      setup_error_ = std::string("SetUpTestSuite: ") + e.what();
    }
  }
  static void start() {
    // Without the translation cache: these tests time and cancel decodes of repeated
    // requests, which it would answer at once (its tests: server.keys_and_cache).
    std::ostringstream config;
    config << "server:\n  log_format: json\n  shutdown_grace_seconds: 10\n"
           << "  translation_cache_mb: 0\n"
           << "limits:\n  max_characters_per_request: " << kMaxCharacters
           << "\n  max_input_tokens: " << kMaxInputTokens
           << "\n  max_beam_size: " << kMaxBeam
           << "\n  max_decoding_length: " << kMaxLength << "\n"
           << "batching:\n  max_queue_sentences: 256\n"
           << "models:\n  - name: m30k\n    path: " << kModelDir << "\n";
    server_ = new nmt::test::LoopbackServer(kPrefix, config.str(), {"--unix-socket", socket_path()});
    nmt::TranslatorOptions options;
    options.device = nmt::Device::kCpu;
    engine_ = nmt::Translator::load(kModelDir, options).release();
  }
  static void TearDownTestSuite() {
    if (server_) {
      const int rc = server_->process().stop(SIGTERM, 30);
      EXPECT_EQ(rc, 0) << "nmt-server did not exit 0 on SIGTERM\n" << server_->process().log();
    }
    delete server_;
    delete engine_;
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    // Bounded wait for SERVING (model load included).
    const std::string why = server_->wait_serving();
    ASSERT_TRUE(why.empty()) << why;
  }

  static constexpr const char* kPrefix = "nmt-server-test-";
  static std::string socket_path() { return (nmt::test::LoopbackServer::dir_for(kPrefix) / "grpc.sock").string(); }

  static std::unique_ptr<nmt::v1::TranslationService::Stub> stub() {
    return nmt::v1::TranslationService::NewStub(server_->channel());
  }

  // Translate over `channel` (the server's TCP port when null).
  static grpc::Status call(const nmt::v1::TranslateRequest& request,
                           nmt::v1::TranslateResponse* response, int deadline_ms = 60000,
                           const std::shared_ptr<grpc::Channel>& channel = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(deadline_ms));
    return nmt::v1::TranslationService::NewStub(channel ? channel : server_->channel())->Translate(&ctx, request, response);
  }

  static nmt::v1::TranslateRequest request(const std::vector<std::string>& texts, int beam,
                                           int nbest = 1) {
    nmt::v1::TranslateRequest r;
    for (const std::string& t : texts) r.add_texts(t);
    r.mutable_options()->set_beam_size(beam);
    r.mutable_options()->set_num_hypotheses(nbest);
    r.mutable_options()->set_max_decoding_length(kMaxLength);
    r.mutable_options()->set_return_scores(true);
    r.mutable_options()->set_return_token_ids(true);
    return r;
  }

  static std::vector<nmt::Translation> reference(const std::vector<std::string>& texts, int beam,
                                                 int nbest = 1) {
    nmt::DecodeOptions o;
    o.beam_size = beam;
    o.num_hypotheses = nbest;
    o.max_decoding_length = kMaxLength;
    return engine_->translate(texts, o);
  }

  static std::string scrape() { return nmt::test::http_get(server_->metrics_port(), "/metrics"); }

  static void expect_equal(const nmt::v1::TranslateResponse& got,
                           const std::vector<nmt::Translation>& want) {
    ASSERT_EQ(got.translations_size(), static_cast<int>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      const auto& g = got.translations(static_cast<int>(i));
      ASSERT_EQ(g.hypotheses_size(), static_cast<int>(want[i].hypotheses.size())) << i;
      for (size_t h = 0; h < want[i].hypotheses.size(); ++h) {
        const auto& gh = g.hypotheses(static_cast<int>(h));
        const nmt::Hypothesis& wh = want[i].hypotheses[h];
        EXPECT_EQ(gh.text(), wh.text) << "sentence " << i << " hypothesis " << h;
        EXPECT_EQ(std::vector<int>(gh.token_ids().begin(), gh.token_ids().end()), wh.ids);
        EXPECT_NEAR(gh.score(), wh.score, 1e-4);
      }
    }
  }

  static nmt::test::LoopbackServer* server_;
  static nmt::Translator* engine_;
  static std::string setup_error_;  // why SetUpTestSuite could not start the server
};

nmt::test::LoopbackServer* ServerTest::server_ = nullptr;
nmt::Translator* ServerTest::engine_ = nullptr;
std::string ServerTest::setup_error_;

void expect_refused(const grpc::Status& status, grpc::StatusCode code, const std::string& message) {
  EXPECT_EQ(status.error_code(), code) << status.error_message();
  EXPECT_EQ(status.error_message(), message);
}

}  // namespace

TEST_F(ServerTest, TranslationsEqualTheEngine) {
  const std::vector<std::string> texts = sentences(6);
  for (int beam : {1, 4}) {
    nmt::v1::TranslateResponse response;
    const grpc::Status status = call(request(texts, beam), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.model(), "m30k");
    EXPECT_FALSE(response.request_id().empty());
    EXPECT_GT(response.timings().total_ms(), 0);
    EXPECT_GT(response.input_tokens(), 0);
    expect_equal(response, reference(texts, beam));
  }
}

// The same server on its Unix domain socket (server.unix_socket) beside TCP.
TEST_F(ServerTest, UnixSocketServesTheSameTranslations) {
  ASSERT_TRUE(fs::is_socket(socket_path())) << socket_path();
  const auto channel = grpc::CreateChannel("unix:" + socket_path(), grpc::InsecureChannelCredentials());
  const std::vector<std::string> texts = sentences(3);
  nmt::v1::TranslateResponse response;
  const grpc::Status status = call(request(texts, 4), &response, 60000, channel);
  ASSERT_TRUE(status.ok()) << status.error_message();
  expect_equal(response, reference(texts, 4));
}

TEST_F(ServerTest, NBestListsEqualTheEngine) {
  const std::vector<std::string> texts = sentences(3);
  nmt::v1::TranslateResponse response;
  ASSERT_TRUE(call(request(texts, 4, 4), &response).ok());
  expect_equal(response, reference(texts, 4, 4));
  for (const auto& t : response.translations()) {
    ASSERT_EQ(t.hypotheses_size(), 4);
    for (int h = 1; h < 4; ++h) EXPECT_GE(t.hypotheses(h - 1).score(), t.hypotheses(h).score());
  }
}

// options.split_sentences: a paragraph of three sentences, longer in total than
// limits.max_input_tokens, equals its sentences translated one by one and joined with the
// paragraph's whitespace; each sentence keeps its own n-best, scores and token ids.
TEST_F(ServerTest, SplitSentencesEqualsTheSentencesTranslatedOneByOne) {
  const std::vector<std::string> parts = {"A man in a blue shirt and black jeans is riding an old red bike down the busy street.",
                                          "Two black dogs with white spots are playing with a yellow ball in the deep snow!",
                                          "Is the little girl in the pink dress sitting on a wooden bench near the lake?"};
  const std::string paragraph = "  " + parts[0] + " " + parts[1] + "\n\n" + parts[2] + "\n";
  int64_t total = 0;
  for (const std::string& p : parts) total += int64_t(engine_->tokenizer().encode(p).size());
  ASSERT_GT(engine_->tokenizer().encode(paragraph).size(), size_t(kMaxInputTokens))
      << "the paragraph must pass max_input_tokens for the test to mean anything";

  nmt::v1::TranslateResponse whole;
  nmt::v1::TranslateRequest unsplit = request({paragraph}, 4);
  unsplit.mutable_options()->set_split_sentences(false);
  expect_refused(call(unsplit, &whole), grpc::StatusCode::INVALID_ARGUMENT,
                 "texts[0] has " + std::to_string(engine_->tokenizer().encode(paragraph).size()) +
                     " tokens, more than limits.max_input_tokens (48); split it into shorter "
                     "sentences (input is never truncated)");

  nmt::v1::TranslateRequest split = request({paragraph, parts[1]}, 4, 2);
  split.mutable_options()->set_split_sentences(true);
  nmt::v1::TranslateResponse response;
  const grpc::Status status = call(split, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::vector<nmt::Translation> want = reference(parts, 4, 2);
  ASSERT_EQ(response.translations_size(), 2);
  const auto& t = response.translations(0);
  ASSERT_EQ(t.hypotheses_size(), 1);
  EXPECT_EQ(t.hypotheses(0).text(), "  " + want[0].hypotheses[0].text + " " + want[1].hypotheses[0].text +
                                        "\n\n" + want[2].hypotheses[0].text + "\n");
  ASSERT_EQ(t.sentences_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.sentences(i).source(), parts[size_t(i)]);
    ASSERT_EQ(t.sentences(i).hypotheses_size(), 2);
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(t.sentences(i).hypotheses(h).text(), want[size_t(i)].hypotheses[size_t(h)].text);
      EXPECT_NEAR(t.sentences(i).hypotheses(h).score(), want[size_t(i)].hypotheses[size_t(h)].score, 1e-4);
      EXPECT_EQ(std::vector<int>(t.sentences(i).hypotheses(h).token_ids().begin(),
                                 t.sentences(i).hypotheses(h).token_ids().end()),
                want[size_t(i)].hypotheses[size_t(h)].ids);
    }
  }
  // A text of one sentence is one sentence.
  ASSERT_EQ(response.translations(1).sentences_size(), 1);
  EXPECT_EQ(response.translations(1).hypotheses(0).text(), want[1].hypotheses[0].text);
  EXPECT_EQ(response.input_tokens(), total + int64_t(engine_->tokenizer().encode(parts[1]).size()));

  // One sentence over the limit is still refused, named, never truncated.
  std::string longer = "Dog";
  for (int i = 0; i < 60; ++i) longer += " dog";
  longer += " runs.";
  nmt::v1::TranslateRequest too_long = request({parts[0] + " " + longer}, 4);
  too_long.mutable_options()->set_split_sentences(true);
  expect_refused(call(too_long, &response), grpc::StatusCode::INVALID_ARGUMENT,
                 "texts[0] sentence 1 (\"Dog dog dog dog dog dog dog dog dog dog ...\") has " +
                     std::to_string(engine_->tokenizer().encode(longer).size()) +
                     " tokens, more than limits.max_input_tokens (48); split it into shorter "
                     "sentences (input is never truncated)");
  // Characters, not sentences, bound a request: all the texts together.
  nmt::v1::TranslateRequest too_many = request({std::string(kMaxCharacters / 2, 'a'), std::string(kMaxCharacters / 2 + 1, 'b')}, 1);
  expect_refused(call(too_many, &response), grpc::StatusCode::INVALID_ARGUMENT,
                 "the texts have " + std::to_string(kMaxCharacters + 1) +
                     " characters, more than limits.max_characters_per_request (" + std::to_string(kMaxCharacters) +
                     "); send the text in several requests");
}

TEST_F(ServerTest, BadInputsAreRefusedWithTheirStatusAndMessage) {
  using grpc::StatusCode;
  nmt::v1::TranslateResponse response;
  const std::string ok = "A dog runs.";
  auto r = request({ok}, 4);

  nmt::v1::TranslateRequest empty = r;
  empty.clear_texts();
  expect_refused(call(empty, &response), StatusCode::INVALID_ARGUMENT,
                 "texts is empty: send at least one sentence");

  expect_refused(call(request({ok, ""}, 4), &response), StatusCode::INVALID_ARGUMENT,
                 "texts[1] is empty (or only whitespace)");
  // The C++ stub sends a string that is not UTF-8 (logging an error): the server's parse
  // refuses it.
  expect_refused(call(request({"Caf\xc3", ok}, 4), &response), StatusCode::INVALID_ARGUMENT,
                 "the request does not parse as an nmt.v1.TranslateRequest (a malformed message, "
                 "or a text that is not valid UTF-8)");

  std::string longer;
  for (int i = 0; i < 60; ++i) longer += "dog ";
  const size_t tokens = engine_->tokenizer().encode(longer).size();
  nmt::v1::TranslateRequest unsplit = request({ok, longer}, 4);
  unsplit.mutable_options()->set_split_sentences(false);
  expect_refused(call(unsplit, &response), StatusCode::INVALID_ARGUMENT,
                 "texts[1] has " + std::to_string(tokens) +
                     " tokens, more than limits.max_input_tokens (48); split it into shorter "
                     "sentences (input is never truncated)");

  expect_refused(call(request({ok}, 0), &response), StatusCode::INVALID_ARGUMENT,
                 "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 0");
  expect_refused(call(request({ok}, 9), &response), StatusCode::INVALID_ARGUMENT,
                 "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 9");
  expect_refused(call(request({ok}, 2, 3), &response), StatusCode::INVALID_ARGUMENT,
                 "options.num_hypotheses must be between 1 and 2 (options.beam_size), got 3");

  nmt::v1::TranslateRequest unknown = r;
  unknown.set_model("en-fr");
  expect_refused(call(unknown, &response), StatusCode::NOT_FOUND,
                 "model 'en-fr' is not served here (models: m30k)");

  // Still serving, and the default model answers to its name too.
  nmt::v1::TranslateRequest named = r;
  named.set_model("m30k");
  ASSERT_TRUE(call(named, &response).ok());
  EXPECT_EQ(response.translations_size(), 1);
}

TEST_F(ServerTest, DeadlineExceeded) {
  // 16 sentences at beam 8 take far longer than 30 ms on this CPU.
  nmt::v1::TranslateResponse response;
  const grpc::Status status = call(request(sentences(16), 8), &response, 30);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  // The server notices too, and goes on serving.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  double expired = 0;
  while (std::chrono::steady_clock::now() < end && expired < 1) {
    expired = metric_value(scrape(), R"(nmt_requests_total{code="DEADLINE_EXCEEDED",model="m30k"})");
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GE(expired, 1) << server_->process().log();
  ASSERT_TRUE(call(request({"A cat."}, 1), &response).ok());
}

TEST_F(ServerTest, ClientCancellation) {
  // 48 sentences at beam 8: ~0.6 s on two cores with the vectorized CPU engine (16 took
  // ~0.2 s, too close to a light request's time on busy cores for the bound below).
  const auto heavy = request(sentences(48), 8);
  nmt::v1::TranslateResponse response;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(call(heavy, &response).ok());
  const double heavy_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  grpc::ClientContext ctx;
  grpc::Status status;
  std::thread caller([&] { status = stub()->Translate(&ctx, heavy, &response); });
  std::this_thread::sleep_for(milliseconds(100));
  ctx.TryCancel();
  caller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  // The engine drops the cancelled sentences at its next decoder step, so the worker is free
  // long before the batch would have finished: a light request right behind it is quick.
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(call(request({"A cat."}, 1), &response).ok());
  const double light_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_LT(light_ms, heavy_ms / 2) << "heavy request " << heavy_ms << " ms";
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  double cancelled = 0;
  while (std::chrono::steady_clock::now() < end && cancelled < 1) {
    cancelled = metric_value(scrape(), R"(nmt_requests_total{code="CANCELLED",model="m30k"})");
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GE(cancelled, 1) << server_->process().log();
  ASSERT_TRUE(call(request({"A cat."}, 1), &response).ok());
}

TEST_F(ServerTest, ThirtyTwoConcurrentClients) {
  constexpr int kClients = 32;
  const std::vector<std::string> texts = sentences(kClients);
  const std::vector<nmt::Translation> want = reference(texts, 4);
  std::vector<nmt::v1::TranslateResponse> got(kClients);
  std::vector<grpc::Status> status(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      // One connection per client, as separate processes would have.
      grpc::ChannelArguments args;
      args.SetInt("grpc.use_local_subchannel_pool", 1);
      auto s = nmt::v1::TranslationService::NewStub(grpc::CreateCustomChannel(
          "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials(), args));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      // A fresh channel's first connect can fail transiently on a loaded machine (seen:
      // "failed to connect to all addresses" while CI ran beside it): wait for it instead.
      ctx.set_wait_for_ready(true);
      status[i] = s->Translate(&ctx, request({texts[i]}, 4), &got[i]);
    });
  }
  for (auto& t : clients) t.join();
  int batched = 0;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(status[i].ok()) << i << ": " << status[i].error_message();
    ASSERT_EQ(got[i].translations_size(), 1);
    EXPECT_EQ(got[i].translations(0).hypotheses(0).text(), want[i].hypotheses[0].text) << texts[i];
    batched += got[i].timings().queue_ms() >= 0;
  }
  EXPECT_EQ(batched, kClients);
}

TEST_F(ServerTest, StreamAnswersEveryMessageInOrder) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = stub()->TranslateStream(&ctx);
  const std::vector<std::string> texts = sentences(5);
  for (int i = 0; i < 5; ++i) {
    nmt::v1::TranslateRequest r = request({texts[i]}, i == 2 ? 0 : 2);  // #2 is invalid
    r.set_request_id("s-" + std::to_string(i));
    ASSERT_TRUE(stream->Write(r));
  }
  stream->WritesDone();
  const std::vector<nmt::Translation> want = reference(texts, 2);
  nmt::v1::TranslateStreamResponse response;
  int n = 0;
  while (stream->Read(&response)) {
    EXPECT_EQ(response.request_id(), "s-" + std::to_string(n));
    if (n == 2) {
      EXPECT_EQ(response.status_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_EQ(response.status_message(),
                "options.beam_size must be between 1 and 8 (limits.max_beam_size), got 0");
    } else {
      EXPECT_EQ(response.status_code(), 0) << response.status_message();
      ASSERT_EQ(response.response().translations_size(), 1);
      EXPECT_EQ(response.response().translations(0).hypotheses(0).text(), want[n].hypotheses[0].text);
    }
    ++n;
  }
  EXPECT_EQ(n, 5);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServerTest, ListModels) {
  grpc::ClientContext ctx;
  nmt::v1::ListModelsResponse response;
  ASSERT_TRUE(stub()->ListModels(&ctx, {}, &response).ok());
  ASSERT_EQ(response.models_size(), 1);
  EXPECT_EQ(response.models(0).name(), "m30k");
  EXPECT_EQ(response.models(0).device(), "cpu");
  EXPECT_TRUE(response.models(0).is_default());
  EXPECT_EQ(response.models(0).vocab_size(), engine_->tokenizer().vocab_size());
}

// The standard health protocol, served by the server's own HealthService: Check answers the
// whole server ("") and the service by name, NOT_FOUND for a name it does not serve; Watch
// sends the status at once (SERVICE_UNKNOWN for such a name) and stays open.
TEST_F(ServerTest, HealthAnswersCheckAndWatch) {
  using grpc::health::v1::HealthCheckRequest;
  using grpc::health::v1::HealthCheckResponse;
  auto health = grpc::health::v1::Health::NewStub(server_->channel());
  for (const char* name : {"", "nmt.v1.TranslationService"}) {
    grpc::ClientContext ctx;
    HealthCheckRequest request;
    request.set_service(name);
    HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&ctx, request, &response).ok()) << name;
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING) << name;
  }
  {
    grpc::ClientContext ctx;
    HealthCheckRequest request;
    request.set_service("no.such.Service");
    HealthCheckResponse response;
    const grpc::Status status = health->Check(&ctx, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(status.error_message(), "unknown service: no.such.Service");
  }
  for (const auto& [name, want] : {std::pair{"", HealthCheckResponse::SERVING},
                                   std::pair{"no.such.Service", HealthCheckResponse::SERVICE_UNKNOWN}}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(name);
    auto watch = health->Watch(&ctx, request);
    HealthCheckResponse response;
    ASSERT_TRUE(watch->Read(&response)) << name;
    EXPECT_EQ(response.status(), want) << name;
    ctx.TryCancel();  // the watch stays open until its client goes
    EXPECT_FALSE(watch->Read(&response)) << name;
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::CANCELLED) << name;
  }
}

TEST_F(ServerTest, MetricsCountTheRequestsSent) {
  const std::string before = scrape();
  for (const char* family :
       {"nmt_requests_total", "nmt_request_duration_seconds", "nmt_queue_wait_seconds",
        "nmt_encode_seconds", "nmt_decode_seconds", "nmt_active_rows", "nmt_active_sentences",
        "nmt_admitted_sentences", "nmt_step_duration_seconds", "nmt_time_to_first_step_seconds",
        "nmt_input_tokens_total",
        "nmt_output_tokens_total", "nmt_inflight_requests", "nmt_gpu_memory_bytes",
        "nmt_model_loaded"}) {
    EXPECT_NE(before.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_EQ(metric_value(before, R"(nmt_model_loaded{device="cpu",model="m30k"})"), 1);

  const std::string ok_series = R"(nmt_requests_total{code="OK",model="m30k"})";
  const std::string bad_series = R"(nmt_requests_total{code="INVALID_ARGUMENT",model="m30k"})";
  const std::string in_series = R"(nmt_input_tokens_total{model="m30k"})";
  const std::string out_series = R"(nmt_output_tokens_total{model="m30k"})";
  const std::string count_series = R"(nmt_request_duration_seconds_count{model="m30k"})";
  const std::string decode_series = R"(nmt_decode_seconds_count{model="m30k"})";
  const std::string step_series = R"(nmt_step_duration_seconds_count{model="m30k"})";
  auto value0 = [&](const std::string& series) { return std::max(0.0, metric_value(before, series)); };

  const std::vector<std::string> texts = sentences(7);
  int64_t input_tokens = 0, output_tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    nmt::v1::TranslateResponse response;
    ASSERT_TRUE(call(request({texts[i]}, 2), &response).ok());
    input_tokens += static_cast<int64_t>(engine_->tokenizer().encode(texts[i]).size());
    output_tokens += response.translations(0).hypotheses(0).token_ids_size();
  }
  nmt::v1::TranslateResponse response;
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(call(request({""}, 2), &response).ok());

  const std::string after = scrape();
  EXPECT_EQ(metric_value(after, ok_series) - value0(ok_series), 7);
  EXPECT_EQ(metric_value(after, bad_series) - value0(bad_series), 3);
  EXPECT_EQ(metric_value(after, count_series) - value0(count_series), 10);
  EXPECT_EQ(metric_value(after, in_series) - value0(in_series), input_tokens);
  EXPECT_EQ(metric_value(after, out_series) - value0(out_series), output_tokens);
  EXPECT_EQ(metric_value(after, decode_series) - value0(decode_series), 7);  // OK requests
  EXPECT_GE(metric_value(after, step_series) - value0(step_series), 7);  // one after another
  EXPECT_EQ(metric_value(after, "nmt_inflight_requests"), 0);
}

TEST_F(ServerTest, OneJsonLogLinePerRequestWithItsId) {
  nmt::v1::TranslateRequest r = request({"A boy."}, 1);
  r.set_request_id("log-check-1");
  nmt::v1::TranslateResponse response;
  ASSERT_TRUE(call(r, &response).ok());
  EXPECT_EQ(response.request_id(), "log-check-1");
  r.set_request_id("log-check-2");
  r.mutable_options()->set_beam_size(0);
  ASSERT_FALSE(call(r, &response).ok());
  const std::string log = server_->process().log();
  std::istringstream lines(log);
  std::string line;
  int ok_lines = 0, error_lines = 0;
  while (std::getline(lines, line)) {
    if (line.find("\"request_id\":\"log-check-1\"") != std::string::npos) {
      ++ok_lines;
      EXPECT_NE(line.find("\"level\":\"info\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"code\":\"OK\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"sentences\":1"), std::string::npos) << line;
    }
    if (line.find("\"request_id\":\"log-check-2\"") != std::string::npos) {
      ++error_lines;
      EXPECT_NE(line.find("\"code\":\"INVALID_ARGUMENT\""), std::string::npos) << line;
      EXPECT_NE(line.find("options.beam_size"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(ok_lines, 1) << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
  EXPECT_EQ(error_lines, 1);
}
