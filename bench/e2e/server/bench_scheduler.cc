// nmt-bench-scheduler: the step-level scheduler in-process, without gRPC: CLIENTS closed-loop
// clients (each submits its next request when the previous one is answered) over WORKERS
// decode loops of the model. Separates what the decode loop costs from what the network
// layer costs when a served figure falls short of the engine's offline throughput.
//
//   nmt-bench-scheduler --model DIR --source FILE [--device cuda] [--precision float16]
//       [--workers 1] [--clients 64] [--sentences-per-request 1] [--seconds 5] [--beam 4]
//       [--max-active-sentences 256] [--max-active-rows 1024] [--max-admit-tokens 2048]
//
// Prints one "RESULT {json}" line: sentences/s, latency percentiles, and where the loop
// threads' time went (decoder steps, admissions' encode, the requests' callbacks).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/translator.h"
#include "server/scheduling/scheduler.h"

using namespace nmt;
using namespace nmt::server;

namespace {

struct Args {
  std::string model, source;
  Device device = Device::kCuda;
  Precision precision = Precision::kFloat16;
  int workers = 1, clients = 64, per_request = 1, beam = 4;
  double seconds = 5;
  SchedulingOptions batching;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size())))];
}

struct Counts {
  double step_s = 0, encode_s = 0, callback_s = 0;
  long steps = 0, admitted = 0, active_rows = 0;
  // Decoder steps per loop, and how often a step ran on another loop than the step before:
  // one client's sentences should stay on one warm loop.
  std::vector<long> loop_steps;
  long loop_switches = 0;
  int last_loop = -1;
};
struct Totals : Counts {
  std::mutex mutex;
};

int run(const Args& a) {
  TranslatorOptions o;
  o.device = a.device;
  o.precision = a.precision;
  std::vector<std::unique_ptr<Translator>> translators;
  std::vector<std::unique_ptr<DecodeLoop>> loops;
  std::vector<DecodeLoop*> raw;
  for (int w = 0; w < a.workers; ++w) {
    translators.push_back(Translator::load(a.model, o));
    loops.push_back(translators.back()->make_loop(
        {a.batching.max_active_sentences, a.batching.max_active_rows, 256}));
    raw.push_back(loops.back().get());
  }
  std::vector<std::vector<int>> ids;
  std::ifstream in(a.source);
  for (std::string line; std::getline(in, line);) ids.push_back(translators[0]->tokenizer().encode(line));
  if (ids.empty()) throw Error(ErrorCode::kNotFound, "no sentences in " + a.source);

  Totals totals;
  SchedulerHooks hooks;
  hooks.on_step = [&](int loop, int rows, int, int admitted, double step_s, double encode_s) {
    std::lock_guard<std::mutex> lock(totals.mutex);
    if (rows == 0) return;  // the loop went idle: no step
    totals.loop_steps[size_t(loop)]++;
    totals.loop_switches += totals.last_loop >= 0 && totals.last_loop != loop;
    totals.last_loop = loop;
    totals.steps++;
    totals.step_s += step_s;
    totals.encode_s += encode_s;
    totals.admitted += admitted;
    totals.active_rows += rows;
  };
  // Texts are made on the scheduler's responder thread, as in the server.
  const Tokenizer* tokenizer = &translators[0]->tokenizer();
  Scheduler scheduler(raw, a.batching, hooks, [tokenizer](const std::vector<int>& ids) { return tokenizer->decode(ids); });
  DecodeOptions d;
  d.beam_size = a.beam;

  std::atomic<bool> stop{false};
  std::atomic<size_t> next{0};
  std::atomic<long> sentences{0};
  std::mutex lat_mutex;
  std::vector<double> latencies;
  auto client = [&] {
    std::mutex m;
    std::condition_variable cv;
    while (!stop) {
      std::vector<std::vector<int>> request;
      for (int i = 0; i < a.per_request; ++i) request.push_back(ids[next++ % ids.size()]);
      bool done = false;
      const auto t0 = std::chrono::steady_clock::now();
      scheduler.submit(request, d, Clock::time_point::max(), [&](JobResult r) {
        const auto c0 = std::chrono::steady_clock::now();
        if (!r.ok) std::cerr << "error: " << r.message << "\n";
        {
          std::lock_guard<std::mutex> lock(m);
          done = true;
        }
        cv.notify_one();
        std::lock_guard<std::mutex> lock(totals.mutex);
        totals.callback_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      });
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return done; });
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      sentences += a.per_request;
      std::lock_guard<std::mutex> l(lat_mutex);
      latencies.push_back(ms);
    }
  };
  // Warm-up (graph captures, first-use setup), then the measured pass.
  for (int pass = 0; pass < 2; ++pass) {
    stop = false;
    sentences = 0;
    latencies.clear();
    {
      std::lock_guard<std::mutex> lock(totals.mutex);
      static_cast<Counts&>(totals) = Counts();
      totals.loop_steps.assign(size_t(a.workers), 0);
    }
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < a.clients; ++c) threads.emplace_back(client);
    std::this_thread::sleep_for(std::chrono::duration<double>(pass == 0 ? 2.0 : a.seconds));
    stop = true;
    for (auto& t : threads) t.join();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass == 0) continue;
    std::lock_guard<std::mutex> lock(totals.mutex);
    std::ostringstream js;
    js << "{\"engine\":\"nmt-scheduler\",\"device\":\"" << device_name(translators[0]->device())
       << "\",\"workers\":" << a.workers << ",\"clients\":" << a.clients << ",\"sentences_per_request\":"
       << a.per_request << ",\"seconds\":" << wall << ",\"sentences_per_s\":" << double(sentences) / wall
       << ",\"p50_ms\":" << percentile(latencies, 50) << ",\"p99_ms\":" << percentile(latencies, 99)
       << ",\"steps\":" << totals.steps << ",\"rows_per_step\":" << double(totals.active_rows) / std::max(totals.steps, 1L)
       << ",\"admitted_per_step\":" << double(totals.admitted) / std::max(totals.steps, 1L)
       << ",\"loop_step_s\":" << totals.step_s << ",\"loop_encode_s\":" << totals.encode_s
       << ",\"loop_callback_s\":" << totals.callback_s << ",\"loop_threads_s\":" << wall * a.workers
       << ",\"loop_switches\":" << totals.loop_switches << ",\"steps_per_loop\":[";
    for (size_t i = 0; i < totals.loop_steps.size(); ++i) js << (i ? "," : "") << totals.loop_steps[i];
    js << "]}";
    std::cout << "RESULT " << js.str() << std::endl;
  }
  scheduler.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << k << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--model") a.model = next();
    else if (k == "--source") a.source = next();
    else if (k == "--device") { if (!parse_device(next(), &a.device)) return 2; }
    else if (k == "--precision") { if (!parse_precision(next(), &a.precision)) return 2; }
    else if (k == "--workers") a.workers = std::stoi(next());
    else if (k == "--clients") a.clients = std::stoi(next());
    else if (k == "--sentences-per-request") a.per_request = std::stoi(next());
    else if (k == "--seconds") a.seconds = std::stod(next());
    else if (k == "--beam") a.beam = std::stoi(next());
    else if (k == "--max-active-sentences") a.batching.max_active_sentences = std::stoi(next());
    else if (k == "--max-active-rows") a.batching.max_active_rows = std::stoi(next());
    else if (k == "--max-admit-tokens") a.batching.max_admit_tokens = std::stoi(next());
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  if (a.model.empty() || a.source.empty()) {
    std::cerr << "need --model and --source\n";
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::cerr << "nmt-bench-scheduler: " << e.what() << "\n";
    return 1;
  }
}
