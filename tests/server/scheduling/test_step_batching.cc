// Step-level batching seen from a client (docs/data-flow.md): the real nmt-server on the CPU (or the GPU),
// requests arriving at random times from a random number of concurrent clients (1-64) with
// mixed decoding options; every output must equal the sentence translated alone offline:
// the same tokens and text, and the same score up to float rounding (a BLAS GEMM's result
// for a row depends on how many rows it multiplies at once: OpenBLAS 0.3.21 gives other
// low bits for 933 of 1024 outputs of a row at 4 rows than at 1). And a short request sent while long ones decode is answered
// long before them.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "model/translator.h"
#include "nmt/v1/translation.grpc.pb.h"
#include "tests/server/support/server_process.h"
#include "tests/server/support/test_sentences.h"

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kModelDir = std::string(NMT_REPO_ROOT) + "/models/m30k-en-de-small";

// NMT_STEP_TEST_DEVICE=cuda (the GPU machine) serves and translates offline on the GPU in
// float32 (steps in flight across the loop's calls); else the CPU.
bool on_gpu() {
  const char* d = std::getenv("NMT_STEP_TEST_DEVICE");
  return d && std::string(d) == "cuda";
}

bool listening(int port);

// nmt-server on loopback with one decode loop of few slots and rows (so that sentences
// queue, join and leave all the time), SERVING when constructed.
class Server {
 public:
  // batching: the config's batching keys
  explicit Server(const std::string& batching) {
    dir_ = fs::temp_directory_path() / ("nmt-step-test-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // Without the translation cache: served against offline decodes, not cached answers.
    std::ofstream(dir_ / "config.yaml") << "server:\n  log_level: warn\n  translation_cache_mb: 0\n"
                                        << "limits:\n  max_input_tokens: 96\n  max_decoding_length: 220\n"
                                        << "batching:\n" << batching << "models:\n  - name: m30k\n    path: "
                                        << kModelDir << "\n    workers: 1\n";
    port_ = nmt::test::free_port();
    process_ = std::make_unique<nmt::test::ServerProcess>(
        NMT_SERVER_BIN,
        std::vector<std::string>{"--config", (dir_ / "config.yaml").string(), "--device", on_gpu() ? "cuda" : "cpu",
         "--precision", "float32", "--host", "127.0.0.1", "--port", std::to_string(port_),
         "--metrics-port", std::to_string(nmt::test::free_port())},
        (dir_ / "server.log").string());
    // The channel only once the port listens: a gRPC channel that finds nothing there backs
    // off for seconds before it tries again.
    const auto end = Clock::now() + std::chrono::seconds(90);
    while (Clock::now() < end && process_->running() && !listening(port_)) std::this_thread::sleep_for(milliseconds(50));
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials());
    auto health = grpc::health::v1::Health::NewStub(channel_);
    while (Clock::now() < end && process_->running()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(500));
      grpc::health::v1::HealthCheckResponse response;
      if (health->Check(&ctx, {}, &response).ok() &&
          response.status() == grpc::health::v1::HealthCheckResponse::SERVING)
        return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    throw std::runtime_error("nmt-server never became SERVING\n" + process_->log());
  }
  ~Server() {
    channel_.reset();
    process_->stop(SIGTERM, 30);
    fs::remove_all(dir_);
  }
  grpc::Status translate(const nmt::v1::TranslateRequest& request, nmt::v1::TranslateResponse* response) {
    auto stub = nmt::v1::TranslationService::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
    return stub->Translate(&ctx, request, response);
  }
  std::string log() const { return process_->log(); }

 private:
  fs::path dir_;
  int port_ = 0;
  std::unique_ptr<nmt::test::ServerProcess> process_;
  std::shared_ptr<grpc::Channel> channel_;
};

bool listening(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

nmt::v1::TranslateRequest request(const std::vector<std::string>& texts, const nmt::DecodeOptions& o) {
  nmt::v1::TranslateRequest r;
  for (const std::string& t : texts) r.add_texts(t);
  auto* opt = r.mutable_options();
  opt->set_beam_size(o.beam_size);
  opt->set_num_hypotheses(o.num_hypotheses);
  opt->set_length_penalty(o.length_penalty);
  opt->set_max_decoding_length(o.max_decoding_length);
  opt->set_min_decoding_length(o.min_decoding_length);
  opt->set_return_scores(true);
  opt->set_return_token_ids(true);
  // Each text as one item, as the offline reference translates it (some hold two sentences).
  opt->set_split_sentences(false);
  return r;
}

// The option mixes the clients draw from.
std::vector<nmt::DecodeOptions> option_mixes() {
  auto make = [](int beam, int nbest, float lp, int max_len, int min_len) {
    nmt::DecodeOptions o;
    o.beam_size = beam;
    o.num_hypotheses = nbest;
    o.length_penalty = lp;
    o.max_decoding_length = max_len;
    o.min_decoding_length = min_len;
    return o;
  };
  return {make(4, 1, 1.0f, 200, 0), make(1, 1, 1.0f, 200, 0), make(2, 2, 1.0f, 200, 0),
          make(4, 3, 0.6f, 200, 0), make(3, 1, 1.0f, 8, 0),   make(5, 1, 1.2f, 200, 12)};
}

}  // namespace

TEST(StepBatching, RandomArrivalsConcurrencyAndOptionsEqualOfflineTranslation) {
  const size_t n = std::getenv("NMT_STEP_TEST_SENTENCES") ? std::stoul(std::getenv("NMT_STEP_TEST_SENTENCES")) : 300;
  const std::vector<std::string> texts = nmt::test::sentences(n);
  const std::vector<nmt::DecodeOptions> mixes = option_mixes();
  // On a GPU two steps are in flight from 8 rows on, each following the one before
  // (StepGroup::follows).
  Server server("  max_active_sentences: 12\n  max_active_rows: 40\n  max_admit_tokens: 128\n  follow_rows: 8\n");

  struct Sent {
    std::vector<std::string> texts;
    size_t mix;
    nmt::v1::TranslateResponse response;
    grpc::Status status;
  };
  std::vector<Sent> requests;
  std::mt19937 rng(2026);
  for (size_t i = 0; i < texts.size();) {
    const size_t k = std::min(texts.size() - i, size_t(1 + rng() % 3));
    requests.push_back({{texts.begin() + long(i), texts.begin() + long(i + k)}, rng() % mixes.size(), {}, {}});
    i += k;
  }
  // Rounds of a random concurrency, each client sending its share at random times.
  size_t next = 0;
  while (next < requests.size()) {
    const size_t clients = std::min(requests.size() - next, size_t(1 + rng() % 64));
    std::vector<std::thread> threads;
    for (size_t c = 0; c < clients; ++c) {
      const unsigned delay = unsigned(rng() % 40);
      threads.emplace_back([&server, &r = requests[next + c], &mixes, delay] {
        std::this_thread::sleep_for(milliseconds(delay));
        r.status = server.translate(request(r.texts, mixes[r.mix]), &r.response);
      });
    }
    for (auto& t : threads) t.join();
    next += clients;
  }

  nmt::TranslatorOptions options;
  options.device = on_gpu() ? nmt::Device::kCuda : nmt::Device::kCpu;
  options.precision = nmt::Precision::kFloat32;
  auto offline = nmt::Translator::load(kModelDir, options);
  int identical = 0, total = 0;
  for (const Sent& r : requests) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << server.log();
    ASSERT_EQ(r.response.translations_size(), int(r.texts.size()));
    for (size_t s = 0; s < r.texts.size(); ++s) {
      const nmt::Translation alone = offline->translate({r.texts[s]}, mixes[r.mix])[0];
      const auto& got = r.response.translations(int(s));
      ++total;
      bool same = got.hypotheses_size() == int(alone.hypotheses.size());
      for (size_t h = 0; same && h < alone.hypotheses.size(); ++h) {
        const auto& g = got.hypotheses(int(h));
        const float score = alone.hypotheses[h].score;
        same = std::vector<int>(g.token_ids().begin(), g.token_ids().end()) == alone.hypotheses[h].ids &&
               std::fabs(g.score() - score) <= 1e-5f * std::max(1.f, std::fabs(score)) &&
               g.text() == alone.hypotheses[h].text;
      }
      identical += same;
      EXPECT_TRUE(same) << "\"" << r.texts[s] << "\" with option mix " << r.mix << ": served \""
                        << (got.hypotheses_size() ? got.hypotheses(0).text() : "") << "\" score "
                        << (got.hypotheses_size() ? got.hypotheses(0).score() : 0.f) << ", alone \""
                        << alone.hypotheses[0].text << "\" score " << alone.hypotheses[0].score;
    }
  }
  std::cout << "served == offline alone: " << identical << " / " << total << " sentences in "
            << requests.size() << " requests\n";
}

TEST(StepBatching, AShortRequestIsAnsweredWhileLongOnesDecode) {
  Server server("  max_active_sentences: 16\n  max_active_rows: 64\n");
  // Long: min_decoding_length keeps them decoding for 210+ steps (of the server's 220), some
  // ten times the short one's, whatever a step costs on the machine.
  nmt::DecodeOptions long_options;
  long_options.min_decoding_length = 210;
  long_options.max_decoding_length = 215;
  nmt::DecodeOptions short_options;
  short_options.max_decoding_length = 200;
  const std::vector<std::string> texts = nmt::test::sentences(4);
  // The long ones decode for seconds on the CPU, for ~100 ms on a GPU.
  const milliseconds pause = on_gpu() ? milliseconds(10) : milliseconds(50);
  // Three long requests, then the short one: {short's ms, the longs' ms}.
  auto race = [&] {
    std::vector<std::future<double>> longs;
    const auto start = Clock::now();
    for (int i = 0; i < 3; ++i) {
      longs.push_back(std::async(std::launch::async, [&, i] {
        nmt::v1::TranslateResponse response;
        const grpc::Status status = server.translate(request({texts[size_t(i)]}, long_options), &response);
        EXPECT_TRUE(status.ok()) << status.error_message();
        return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      }));
    }
    std::this_thread::sleep_for(pause);
    const auto short_start = Clock::now();
    nmt::v1::TranslateResponse response;
    const grpc::Status status = server.translate(request({texts[3]}, short_options), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    const double short_ms = std::chrono::duration<double, std::milli>(Clock::now() - short_start).count();
    double long_ms = 0;
    for (auto& f : longs) long_ms = std::max(long_ms, f.get());
    return std::make_pair(short_ms, long_ms);
  };
  // A GPU's first race captures the step graphs of each shape and grows the caches to 200
  // positions (milliseconds each, against a ~100 ms race): the second is timed.
  if (on_gpu()) race();
  const auto [short_ms, long_ms] = race();
  std::cout << "short request " << short_ms << " ms while the long ones took " << long_ms << " ms\n";
  EXPECT_LT(short_ms * 4, long_ms - double(pause.count()));
}
