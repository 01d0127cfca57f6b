// nmt-loadgen: closed-loop load generator for nmt-server (N clients, each sending its next
// request as soon as the previous one is answered), and a health probe:
//   nmt-loadgen --target 127.0.0.1:50051 --input sentences.txt[.gz] --clients 32 --duration 30
//   nmt-loadgen --health-check --target 127.0.0.1:50051   (exit 0 iff SERVING)
//   nmt-loadgen --ping --clients 1 --duration 5   (the transport's round trip alone)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "nmt/v1/translation.grpc.pb.h"
#include "server/app/abseil_locks.h"
#include "tools/loadgen/latency_stats.h"
#include "tools/loadgen/sentence_source.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string target = "127.0.0.1:50051";
  std::string input;
  std::string model;
  int clients = 8;
  double duration_s = 0;  // 0 = use count
  long count = 0;         // total requests; 0 = use duration
  int beam = 4;
  int sentences_per_request = 1;
  int timeout_ms = 10000;
  bool health_check = false;
  bool ping = false;  // closed-loop Health.Check calls instead of Translate
  bool busy_poll = false;  // wait for answers by polling, never sleeping (see kUsage)
  int client_threads = 0;  // 0: a thread per client; else the clients shared out over this many
  int connections = 0;  // 0: a connection per client; else the clients share this many
  std::string source_language;
  std::vector<std::string> target_languages;  // in turn across requests; empty: the model's
  int decoding_length = 0;  // > 0: every sentence exactly this many target tokens, EOS included
  // > 0: this fraction of the sentences repeat one of the input's first repeat_pool lines
  // (a translation cache's hits), the others are never sent twice (repeated_text).
  double repeat_fraction = 0;
  int repeat_pool = 100;
  bool json = false;
};

const char* kUsage =
    "Usage: nmt-loadgen --input FILE [--target HOST:PORT] [--clients N]\n"
    "                   (--duration SECONDS | --count REQUESTS) [--beam K]\n"
    "                   [--sentences-per-request N] [--model NAME] [--timeout-ms MS] [--json]\n"
    "                   [--busy-poll | --client-threads N] [--connections N]\n"
    "                   [--source-language L] [--target-languages L1,L2,...]\n"
    "                   [--decoding-length N] [--repeat-fraction F [--repeat-pool N]]\n"
    "       nmt-loadgen --ping [--target HOST:PORT] [--clients N] (--duration S | --count N)\n"
    "                   [--busy-poll | --client-threads N] [--connections N]\n"
    "       nmt-loadgen --health-check [--target HOST:PORT] [--timeout-ms MS]\n\n"
    "Closed loop: each of N clients sends its next Translate request as soon as the previous\n"
    "one is answered, taking sentences from FILE (one per line, gzip or plain) in turn.\n"
    "Prints latency p50/p90/p99, requests/s, sentences/s and errors; exits 1 when any\n"
    "request failed. --health-check asks grpc.health.v1.Health and exits 0 iff SERVING.\n"
    "--ping runs the same closed loop with Health.Check calls: the round trip of a call\n"
    "that does no work, to set beside a Translate latency measured on the same machine.\n"
    "--busy-poll: each client waits for its answer by polling its completion queue instead\n"
    "of sleeping in the call. A thread that sleeps through a call of a few milliseconds pays\n"
    "its CPU's wake-up when the answer comes (on virtual machines a large part of a\n"
    "millisecond); polling leaves that client-side cost out of the latency, so that it\n"
    "measures the server and the transport. It keeps one core busy per client.\n"
    "--client-threads N: the clients' calls are driven asynchronously by N threads, one\n"
    "completion queue each, instead of a blocking thread per client (still one call in\n"
    "flight per client): hundreds of client threads otherwise take the cores a server on\n"
    "the same machine needs.\n"
    "--connections N: the clients share N connections (client i on connection i mod N),\n"
    "their calls multiplexed as HTTP/2 streams, as behind a proxy that pools its upstream\n"
    "connections; by default each client has a connection of its own.\n"
    "--target-languages: a multilingual model's target languages, taken in turn by the\n"
    "requests (a mixed load); --decoding-length N: every sentence N target tokens, EOS\n"
    "included (min_decoding_length N - 1, max N), so that all take the same decoder steps\n"
    "(a random-weight model's EOS would end them early).\n"
    "--repeat-fraction F (0-1): a fraction F of the sentences, spread evenly, are one of the\n"
    "input's first --repeat-pool lines (default 100), the rest the other lines in turn, each\n"
    "sent once: every sentence starts with '(R) ', R the pass over the file of a fresh one\n"
    "(0 for the repeats), so that it is still new to a translation cache and the fresh\n"
    "sentences are as long as the repeats. Two runs send the same sentences.\n"
    "Defaults: --target 127.0.0.1:50051 --clients 8 --beam 4 --sentences-per-request 1\n"
    "--timeout-ms 10000 (per request deadline).\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "nmt-loadgen: " << message << "\n\n" << kUsage;
  std::exit(2);
}

double to_fraction(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && v >= 0 && v <= 1) return v;
  } catch (const std::exception&) {
  }
  usage_error("--" + flag + " needs a number from 0 to 1, got '" + value + "'");
}

long to_number(const std::string& flag, const std::string& value, long lo) {
  try {
    size_t used = 0;
    const long v = std::stol(value, &used);
    if (used == value.size() && v >= lo) return v;
  } catch (const std::exception&) {
  }
  usage_error("--" + flag + " needs an integer >= " + std::to_string(lo) + ", got '" + value + "'");
}

std::vector<std::string> split_list(const std::string& flag, const std::string& value) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    if (comma == start) usage_error("--" + flag + " has an empty item in '" + value + "'");
    items.push_back(value.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg == "--health-check") { o.health_check = true; continue; }
    if (arg == "--ping") { o.ping = true; continue; }
    if (arg == "--json") { o.json = true; continue; }
    if (arg == "--busy-poll") { o.busy_poll = true; continue; }
    if (arg.rfind("--", 0) != 0) usage_error("unexpected argument '" + arg + "'");
    const std::string flag = arg.substr(2);
    if (i + 1 >= argc) usage_error("--" + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "target") o.target = value;
    else if (flag == "input") o.input = value;
    else if (flag == "model") o.model = value;
    else if (flag == "clients") o.clients = static_cast<int>(to_number(flag, value, 1));
    else if (flag == "duration") o.duration_s = static_cast<double>(to_number(flag, value, 1));
    else if (flag == "count") o.count = to_number(flag, value, 1);
    else if (flag == "beam") o.beam = static_cast<int>(to_number(flag, value, 1));
    else if (flag == "sentences-per-request") o.sentences_per_request = static_cast<int>(to_number(flag, value, 1));
    else if (flag == "timeout-ms") o.timeout_ms = static_cast<int>(to_number(flag, value, 1));
    else if (flag == "client-threads") o.client_threads = static_cast<int>(to_number(flag, value, 1));
    else if (flag == "connections") o.connections = static_cast<int>(to_number(flag, value, 1));
    else if (flag == "source-language") o.source_language = value;
    else if (flag == "target-languages") o.target_languages = split_list(flag, value);
    else if (flag == "decoding-length") o.decoding_length = static_cast<int>(to_number(flag, value, 2));
    else if (flag == "repeat-fraction") o.repeat_fraction = to_fraction(flag, value);
    else if (flag == "repeat-pool") o.repeat_pool = static_cast<int>(to_number(flag, value, 1));
    else usage_error("unknown flag --" + flag);
  }
  if (!o.health_check) {
    if (o.input.empty() && !o.ping) usage_error("--input FILE is required");
    if ((o.duration_s > 0) == (o.count > 0)) usage_error("give exactly one of --duration and --count");
    if (o.busy_poll && o.client_threads > 0) usage_error("--busy-poll polls one client per thread: not with --client-threads");
    if (o.connections > o.clients) {
      usage_error("--connections " + std::to_string(o.connections) + " is more than --clients " +
                  std::to_string(o.clients));
    }
  }
  return o;
}

std::chrono::system_clock::time_point deadline_in(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

int health_check(const Options& o) {
  auto channel = grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(deadline_in(o.timeout_ms));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    std::cerr << "nmt-loadgen: health check of " << o.target << " failed: "
              << status.error_message() << " (code " << status.error_code() << ")\n";
    return 1;
  }
  const bool serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return serving ? 0 : 1;
}

// What all clients gathered.
struct Totals {
  std::mutex mutex;
  std::vector<double> latencies_ms;  // successful requests
  // The server's own timings of those requests (Translate only): receipt to response, queue,
  // decode; beside the client's latency they split the time between transport and server.
  std::vector<double> server_total_ms, server_queue_ms, server_decode_ms;
  std::map<std::string, long> errors;  // "CODE: message" -> count
  long sentences = 0;
};

// What one thread's calls gathered, merged into Totals when it ends.
struct Tally {
  std::vector<double> latencies, total, queue, decode;
  std::map<std::string, long> errors;
  long sentences = 0;

  void add(const Options& o, double ms, long n, const nmt::v1::Timings& timings, const std::string& error) {
    if (!error.empty()) {
      ++errors[error];
      return;
    }
    latencies.push_back(ms);
    sentences += n;
    if (!o.ping) {
      total.push_back(timings.total_ms());
      queue.push_back(timings.queue_ms());
      decode.push_back(timings.decode_ms());
    }
  }

  void merge_into(Totals& totals) const {
    std::lock_guard<std::mutex> lock(totals.mutex);
    totals.latencies_ms.insert(totals.latencies_ms.end(), latencies.begin(), latencies.end());
    totals.server_total_ms.insert(totals.server_total_ms.end(), total.begin(), total.end());
    totals.server_queue_ms.insert(totals.server_queue_ms.end(), queue.begin(), queue.end());
    totals.server_decode_ms.insert(totals.server_decode_ms.end(), decode.begin(), decode.end());
    for (const auto& [e, n] : errors) totals.errors[e] += n;
    totals.sentences += sentences;
  }
};

// A connection of its own to the target (a channel with a local subchannel pool does not
// share the process's connection to the same target).
std::shared_ptr<grpc::Channel> own_channel(const Options& o) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  return grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
}

// The clients' connections: each client's own, or with --connections N client i on the
// (i mod N)-th of N shared ones.
class Connections {
 public:
  explicit Connections(const Options& o) : o_(o) {
    for (int i = 0; i < o.connections; ++i) shared_.push_back(own_channel(o));
  }
  // Connects every shared connection before the clients start, so that none of them begins
  // its closed loop on a connection that is still being made: a call on a channel whose first
  // connect failed fails at once until gRPC's reconnect backoff ends (server run 36: one of 16
  // shared connections did so now and then, and its clients counted tens of thousands of
  // errors in a second). False when one did not connect within timeout_ms.
  bool connect_shared(int timeout_ms) const {
    for (const auto& channel : shared_) {
      if (!channel->WaitForConnected(deadline_in(timeout_ms))) return false;
    }
    return true;
  }

  std::shared_ptr<grpc::Channel> for_client(int client) const {
    return shared_.empty() ? own_channel(o_) : shared_[static_cast<size_t>(client) % shared_.size()];
  }

 private:
  const Options& o_;
  std::vector<std::shared_ptr<grpc::Channel>> shared_;
};

// Sentence `n` of the load. Without --repeat-fraction the input's lines in turn. With it, n
// is a repeat when frac(n x golden ratio) < F (a low-discrepancy sequence: the repeats are
// spread evenly and make F of any stretch of sentences): "(0) " and one of the first
// repeat_pool lines; else "(P) " and line pool + n mod (lines - pool) of pass P = n / (lines -
// pool): two different n never give the same fresh sentence. Every sentence carries a prefix
// of the same shape, so that the fresh ones are as long as the repeats: with the prefix on
// the fresh ones alone, a cache's misses were the longer sentences and a cache-on pass
// decoded longer sentences than the cache-off pass it is compared with (bench/history/server.md,
// run 55). At the front, not the end: a server that splits texts into sentences
// (split_sentences) would cut "A man rides. (2)" into the line itself, a hit, and "(2)".
std::string sentence_text(const Options& o, const std::vector<std::string>& sentences, size_t n) {
  if (o.repeat_fraction <= 0) return sentences[n % sentences.size()];
  const size_t pool = static_cast<size_t>(o.repeat_pool);
  if (std::fmod(double(n) * 0.6180339887498949, 1.0) < o.repeat_fraction) return "(0) " + sentences[n % pool];
  const size_t fresh = sentences.size() - pool;
  return "(" + std::to_string(n / fresh) + ") " + sentences[pool + n % fresh];
}

// The next Translate request: the next sentences of the input, in turn across clients.
void fill_request(const Options& o, const std::vector<std::string>& sentences,
                  std::atomic<size_t>& next_sentence, nmt::v1::TranslateRequest* request) {
  request->Clear();
  request->set_model(o.model);
  auto* options = request->mutable_options();
  options->set_beam_size(o.beam);
  if (!o.source_language.empty()) options->set_source_language(o.source_language);
  if (o.decoding_length > 0) {
    // EOS masked until the last token, which max_decoding_length makes the last
    options->set_min_decoding_length(o.decoding_length - 1);
    options->set_max_decoding_length(o.decoding_length);
  }
  for (int i = 0; i < o.sentences_per_request; ++i) {
    const size_t next = next_sentence.fetch_add(1);
    // the request's first sentence picks its target, so that the languages mix evenly
    if (i == 0 && !o.target_languages.empty())
      options->set_target_language(o.target_languages[next % o.target_languages.size()]);
    request->add_texts(sentence_text(o, sentences, next));
  }
}

// "" for a Translate call that returned every translation, else what went wrong.
std::string translate_error(const grpc::Status& status, const nmt::v1::TranslateRequest& request,
                            const nmt::v1::TranslateResponse& response) {
  if (status.ok() && response.translations_size() == request.texts_size()) return "";
  return std::to_string(status.error_code()) + ": " +
         (status.ok() ? "wrong number of translations" : status.error_message());
}

std::string call_error(const grpc::Status& status) {
  return status.ok() ? "" : std::to_string(status.error_code()) + ": " + status.error_message();
}

double elapsed_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Whether the closed loop goes on: requests left (--count) or time left (--duration).
bool more_requests(const Options& o, std::atomic<long>& next_request, Clock::time_point end) {
  if (o.count > 0) return next_request.fetch_add(1) < o.count;
  return Clock::now() < end;
}

// One request of the closed loop: a Translate call of the next sentences, or with --ping a
// Health.Check. Returns the sentences it translated (0 for a ping) or sets *error.
class Caller {
 public:
  Caller(const Options& o, const std::shared_ptr<grpc::Channel>& channel, const std::vector<std::string>& sentences,
         std::atomic<size_t>& next_sentence)
      : o_(o), sentences_(sentences), next_sentence_(next_sentence) {
    if (o.ping) health_ = grpc::health::v1::Health::NewStub(channel);
    else translation_ = nmt::v1::TranslationService::NewStub(channel);
  }

  ~Caller() {
    queue_.Shutdown();
    void* tag;
    bool ok;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  // The call's latency in ms; sentences done in *sentences, the server's timings in *timings
  // (Translate only); *error set when it failed.
  double call(long* sentences, nmt::v1::Timings* timings, std::string* error) {
    grpc::ClientContext context;
    context.set_deadline(deadline_in(o_.timeout_ms));
    if (o_.ping) {
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse response;
      const Clock::time_point start = Clock::now();
      const grpc::Status status =
          o_.busy_poll ? polled(health_->AsyncCheck(&context, request, &queue_), &response)
                       : health_->Check(&context, request, &response);
      const double ms = elapsed_ms(start);
      *sentences = 0;
      *error = call_error(status);
      return ms;
    }
    nmt::v1::TranslateRequest request;
    fill_request(o_, sentences_, next_sentence_, &request);
    nmt::v1::TranslateResponse response;
    const Clock::time_point start = Clock::now();
    const grpc::Status status =
        o_.busy_poll ? polled(translation_->AsyncTranslate(&context, request, &queue_), &response)
                     : translation_->Translate(&context, request, &response);
    const double ms = elapsed_ms(start);
    *sentences = request.texts_size();
    *timings = response.timings();
    *error = translate_error(status, request, response);
    return ms;
  }

 private:
  // Waits for a started call's answer by polling the queue with a zero deadline, so that
  // this thread never sleeps (--busy-poll).
  template <class Reader, class Response>
  grpc::Status polled(Reader reader, Response* response) {
    grpc::Status status;
    int tag = 0;
    reader->Finish(response, &status, &tag);
    void* got = nullptr;
    bool ok = false;
    while (queue_.AsyncNext(&got, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) !=
           grpc::CompletionQueue::GOT_EVENT) {
    }
    return status;  // the queue holds one call at a time: `got` is &tag
  }

  const Options& o_;
  const std::vector<std::string>& sentences_;
  std::atomic<size_t>& next_sentence_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<nmt::v1::TranslationService::Stub> translation_;
  grpc::CompletionQueue queue_;  // --busy-poll's calls
};

void client_loop(const Options& o, int client, const Connections& connections,
                 const std::vector<std::string>& sentences, std::atomic<long>& next_request,
                 std::atomic<size_t>& next_sentence, Clock::time_point end, Totals& totals) {
  Caller caller(o, connections.for_client(client), sentences, next_sentence);
  Tally tally;
  while (more_requests(o, next_request, end)) {
    long n = 0;
    nmt::v1::Timings timings;
    std::string error;
    const double ms = caller.call(&n, &timings, &error);
    tally.add(o, ms, n, timings, error);
  }
  tally.merge_into(totals);
}

// --client-threads: one thread drives clients first, first + step, ... through one completion
// queue, each client on its connection with one call in flight, the next started as soon
// as the previous is answered (the same closed loop as client_loop's).
void shared_client_loop(const Options& o, int first, int step, const Connections& connections,
                        const std::vector<std::string>& sentences,
                        std::atomic<long>& next_request, std::atomic<size_t>& next_sentence,
                        Clock::time_point end, Totals& totals) {
  struct Call {
    std::unique_ptr<grpc::health::v1::Health::Stub> health;
    std::unique_ptr<nmt::v1::TranslationService::Stub> translation;
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::health::v1::HealthCheckResponse>> ping_reader;
    std::unique_ptr<grpc::ClientAsyncResponseReader<nmt::v1::TranslateResponse>> reader;
    grpc::health::v1::HealthCheckRequest ping_request;
    grpc::health::v1::HealthCheckResponse ping_response;
    nmt::v1::TranslateRequest request;
    nmt::v1::TranslateResponse response;
    grpc::Status status;
    Clock::time_point start;
  };
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<Call>> calls;
  for (int c = first; c < o.clients; c += step) {
    auto call = std::make_unique<Call>();
    auto channel = connections.for_client(c);
    if (o.ping) call->health = grpc::health::v1::Health::NewStub(channel);
    else call->translation = nmt::v1::TranslationService::NewStub(channel);
    calls.push_back(std::move(call));
  }
  auto start = [&](Call& c) {
    c.context = std::make_unique<grpc::ClientContext>();
    c.context->set_deadline(deadline_in(o.timeout_ms));
    if (!o.ping) fill_request(o, sentences, next_sentence, &c.request);
    c.start = Clock::now();
    if (o.ping) {
      c.ping_reader = c.health->AsyncCheck(c.context.get(), c.ping_request, &queue);
      c.ping_reader->Finish(&c.ping_response, &c.status, &c);
    } else {
      c.reader = c.translation->AsyncTranslate(c.context.get(), c.request, &queue);
      c.reader->Finish(&c.response, &c.status, &c);
    }
  };
  int in_flight = 0;
  for (auto& c : calls) {
    if (!more_requests(o, next_request, end)) break;
    start(*c);
    ++in_flight;
  }
  Tally tally;
  void* tag = nullptr;
  bool ok = false;
  while (in_flight > 0 && queue.Next(&tag, &ok)) {
    Call& c = *static_cast<Call*>(tag);
    --in_flight;
    const double ms = elapsed_ms(c.start);
    if (o.ping) tally.add(o, ms, 0, {}, call_error(c.status));
    else tally.add(o, ms, c.request.texts_size(), c.response.timings(), translate_error(c.status, c.request, c.response));
    if (more_requests(o, next_request, end)) {
      start(c);
      ++in_flight;
    }
  }
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  tally.merge_into(totals);
}

int load(const Options& o) {
  std::vector<std::string> sentences;
  try {
    if (!o.ping) sentences = nmt::loadgen::read_sentences(o.input);
  } catch (const std::exception& e) {
    std::cerr << "nmt-loadgen: " << e.what() << "\n";
    return 2;
  }
  if (o.repeat_fraction > 0 && sentences.size() <= static_cast<size_t>(o.repeat_pool)) {
    usage_error("--repeat-pool " + std::to_string(o.repeat_pool) + " needs an input of more lines (" + o.input +
                " has " + std::to_string(sentences.size()) + ")");
  }
  const Connections connections(o);
  if (!connections.connect_shared(o.timeout_ms)) {
    std::cerr << "nmt-loadgen: cannot connect to " << o.target << " within " << o.timeout_ms << " ms\n";
    return 1;
  }
  Totals totals;
  std::atomic<long> next_request{0};
  std::atomic<size_t> next_sentence{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  std::vector<std::thread> clients;
  if (o.client_threads > 0) {
    const int threads = std::min(o.client_threads, o.clients);
    for (int t = 0; t < threads; ++t) {
      clients.emplace_back(shared_client_loop, std::cref(o), t, threads, std::cref(connections), std::cref(sentences),
                           std::ref(next_request), std::ref(next_sentence), end, std::ref(totals));
    }
  } else {
    for (int i = 0; i < o.clients; ++i) {
      clients.emplace_back(client_loop, std::cref(o), i, std::cref(connections), std::cref(sentences),
                           std::ref(next_request), std::ref(next_sentence), end, std::ref(totals));
    }
  }
  for (std::thread& t : clients) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

  const nmt::loadgen::LatencySummary s = nmt::loadgen::summarize(totals.latencies_ms);
  long errors = 0;
  for (const auto& [e, n] : totals.errors) errors += n;
  nlohmann::ordered_json report = {
      {"target", o.target}, {"rpc", o.ping ? "Health.Check" : "Translate"}, {"clients", o.clients}, {"beam", o.beam},
      {"busy_poll", o.busy_poll}, {"client_threads", o.client_threads},
      {"connections", o.connections},
      {"sentences_per_request", o.sentences_per_request}, {"repeat_fraction", o.repeat_fraction},
      {"seconds", elapsed},
      {"requests", s.count}, {"errors", errors}, {"sentences", totals.sentences},
      {"requests_per_s", s.count / elapsed}, {"sentences_per_s", totals.sentences / elapsed},
      {"latency_ms", {{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}}},
      {"error_kinds", totals.errors}};
  if (!o.ping) {
    auto brief = [](const std::vector<double>& v) {
      const nmt::loadgen::LatencySummary t = nmt::loadgen::summarize(v);
      return nlohmann::ordered_json{{"mean", t.mean}, {"p50", t.p50}, {"p99", t.p99}};
    };
    report["server_ms"] = {{"total", brief(totals.server_total_ms)},
                           {"queue", brief(totals.server_queue_ms)},
                           {"decode", brief(totals.server_decode_ms)}};
  }
  if (o.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::printf("target %s, %d clients, beam %d, %d sentence(s)/request, %.1f s\n",
                o.target.c_str(), o.clients, o.beam, o.sentences_per_request, elapsed);
    std::printf("requests %zu ok, %ld errors; %.1f requests/s, %.1f sentences/s\n", s.count,
                errors, s.count / elapsed, totals.sentences / elapsed);
    std::printf("latency ms: mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.1f\n", s.mean, s.p50,
                s.p90, s.p99, s.max);
    for (const auto& [e, n] : totals.errors) std::printf("error x%ld: %s\n", n, e.c_str());
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  nmt::server::skip_abseil_deadlock_detection();
  const Options options = parse(argc, argv);
  return options.health_check ? health_check(options) : load(options);
}
