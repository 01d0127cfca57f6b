// Batcher policy with a fake backend (no model): batches by length within max_batch_tokens,
// max_wait_ms, queue bound, cancellation and deadlines before and during decoding, and
// options never mixed in one batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "server/batcher.h"

using namespace nmt::server;
using nmt::ErrorCode;
using std::chrono::milliseconds;

namespace {

// A sentence of `length` ids whose first id tells which sentence it is.
std::vector<int> sentence(int tag, int length) {
  std::vector<int> ids(length, 7);
  ids[0] = tag;
  return ids;
}

struct Batch {
  std::vector<std::vector<int>> ids;
  nmt::DecodeOptions options;
};

// Records every batch; the first call can be held until release() so that work piles up.
class FakeBackend {
 public:
  explicit FakeBackend(bool hold_first = false) : holding_(hold_first) {}

  TranslateBatchFn fn() {
    return [this](const std::vector<std::vector<int>>& ids, const nmt::DecodeOptions& options,
                  nmt::BatchStats* stats, const nmt::CancelFn& cancelled) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        batches_.push_back({ids, options});
        entered_.notify_all();
        released_.wait_for(lock, std::chrono::seconds(10), [&] { return !holding_; });
      }
      if (throw_) throw nmt::Error(ErrorCode::kResourceExhausted, "out of device memory");
      std::vector<nmt::Translation> out(ids.size());
      // Decoding steps: poll the cancel callback like the engine does.
      for (int step = 0; step < steps_; ++step) {
        for (size_t i = 0; i < ids.size(); ++i) {
          if (!out[i].cancelled && cancelled && cancelled(i)) {
            out[i].cancelled = true;
            ++dropped_;
          }
        }
        std::this_thread::sleep_for(milliseconds(step_ms_));
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        if (out[i].cancelled) continue;
        nmt::Hypothesis h;
        h.ids = ids[i];
        h.text = "t" + std::to_string(ids[i][0]) + "/" + std::to_string(ids[i].size());
        out[i].hypotheses.assign(options.num_hypotheses, h);
      }
      stats->encode_seconds = 0.001;
      stats->decode_seconds = 0.002;
      return out;
    };
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    holding_ = false;
    released_.notify_all();
  }
  // Waits until the backend has been entered `n` times.
  bool wait_entered(size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return entered_.wait_for(lock, std::chrono::seconds(5), [&] { return batches_.size() >= n; });
  }
  std::vector<Batch> batches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }
  void set_steps(int steps, int step_ms) { steps_ = steps, step_ms_ = step_ms; }
  void set_throw() { throw_ = true; }
  int dropped() const { return dropped_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable entered_, released_;
  bool holding_;
  std::vector<Batch> batches_;
  int steps_ = 0, step_ms_ = 0;
  bool throw_ = false;
  std::atomic<int> dropped_{0};
};

BatchingOptions options(int max_tokens, int max_sentences, int max_wait_ms, int max_queue = 4096) {
  BatchingOptions o;
  o.max_batch_tokens = max_tokens;
  o.max_batch_sentences = max_sentences;
  o.max_wait_ms = max_wait_ms;
  o.max_queue_sentences = max_queue;
  return o;
}

nmt::DecodeOptions beam(int k) {
  nmt::DecodeOptions o;
  o.beam_size = k;
  return o;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

TEST(Batcher, TranslatesEverySentenceInRequestOrder) {
  FakeBackend backend;
  Batcher batcher(backend.fn(), options(8192, 128, 0));
  auto job = batcher.submit({sentence(1, 5), sentence(2, 2), sentence(3, 9)}, beam(2));
  const JobResult r = batcher.wait(job);
  ASSERT_TRUE(r.ok) << r.message;
  ASSERT_EQ(r.translations.size(), 3u);
  EXPECT_EQ(r.translations[0].hypotheses[0].text, "t1/5");
  EXPECT_EQ(r.translations[1].hypotheses[0].text, "t2/2");
  EXPECT_EQ(r.translations[2].hypotheses[0].text, "t3/9");
  EXPECT_DOUBLE_EQ(r.encode_seconds, 0.001);
  EXPECT_DOUBLE_EQ(r.decode_seconds, 0.002);
}

TEST(Batcher, BatchesAreFormedByLengthWithinMaxBatchTokens) {
  FakeBackend backend(/*hold_first=*/true);
  const int max_tokens = 48, k = 2;
  Batcher batcher(backend.fn(), options(max_tokens, 128, 0));
  auto blocker = batcher.submit({sentence(0, 1)}, beam(k));
  ASSERT_TRUE(backend.wait_entered(1));

  // 40 single-sentence requests of lengths 1..20 (twice), in shuffled arrival order.
  std::vector<int> lengths;
  for (int i = 1; i <= 20; ++i) lengths.insert(lengths.end(), {i, i});
  std::shuffle(lengths.begin(), lengths.end(), std::mt19937(42));
  std::vector<std::shared_ptr<Job>> jobs;
  for (size_t i = 0; i < lengths.size(); ++i) {
    jobs.push_back(batcher.submit({sentence(static_cast<int>(i) + 1, lengths[i])}, beam(k)));
  }
  backend.release();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const JobResult r = batcher.wait(jobs[i]);
    ASSERT_TRUE(r.ok) << r.message;
    EXPECT_EQ(r.translations[0].hypotheses[0].text,
              "t" + std::to_string(i + 1) + "/" + std::to_string(lengths[i]));
  }
  ASSERT_TRUE(batcher.wait(blocker).ok);

  const std::vector<Batch> batches = backend.batches();
  ASSERT_GT(batches.size(), 2u);
  std::vector<std::pair<size_t, size_t>> ranges;  // [shortest, longest] per batch
  size_t sentences = 0;
  for (size_t b = 1; b < batches.size(); ++b) {
    std::vector<size_t> len;
    for (const auto& ids : batches[b].ids) len.push_back(ids.size());
    EXPECT_TRUE(std::is_sorted(len.begin(), len.end())) << "batch " << b << " not sorted by length";
    EXPECT_LE(len.size() * len.back() * k, static_cast<size_t>(max_tokens)) << "batch " << b;
    ranges.emplace_back(len.front(), len.back());
    sentences += len.size();
  }
  EXPECT_EQ(sentences, lengths.size());
  // Batches hold neighbouring lengths: no two batches' length ranges interleave.
  for (size_t a = 0; a < ranges.size(); ++a) {
    for (size_t b = a + 1; b < ranges.size(); ++b) {
      const bool disjoint = ranges[a].second <= ranges[b].first || ranges[b].second <= ranges[a].first;
      EXPECT_TRUE(disjoint) << "[" << ranges[a].first << "," << ranges[a].second << "] and ["
                            << ranges[b].first << "," << ranges[b].second << "]";
    }
  }
}

TEST(Batcher, OversizedSentenceRunsAlone) {
  FakeBackend backend;
  Batcher batcher(backend.fn(), options(10, 128, 0));
  const JobResult r = batcher.wait(batcher.submit({sentence(1, 30)}, beam(1)));
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_EQ(backend.batches().size(), 1u);
}

TEST(Batcher, MaxWaitMsIsHonored) {
  FakeBackend backend;
  Batcher batcher(backend.fn(), options(8192, 128, 150));
  const Clock::time_point start = Clock::now();
  auto first = batcher.submit({sentence(1, 3)}, beam(1));
  std::this_thread::sleep_for(milliseconds(30));
  auto second = batcher.submit({sentence(2, 3)}, beam(1));
  ASSERT_TRUE(batcher.wait(first).ok);
  const double waited = ms_since(start);
  ASSERT_TRUE(batcher.wait(second).ok);
  EXPECT_GE(waited, 145.0);  // the oldest waited for company...
  EXPECT_LT(waited, 1000.0);  // ...but not much longer than max_wait_ms
  ASSERT_EQ(backend.batches().size(), 1u);  // and both rode the same batch
  EXPECT_EQ(backend.batches()[0].ids.size(), 2u);
}

TEST(Batcher, FullBatchDoesNotWaitForMaxWait) {
  FakeBackend backend;
  Batcher batcher(backend.fn(), options(8192, 2, 5000));
  const Clock::time_point start = Clock::now();
  auto job = batcher.submit({sentence(1, 3), sentence(2, 4)}, beam(1));
  ASSERT_TRUE(batcher.wait(job).ok);
  EXPECT_LT(ms_since(start), 1000.0);
}

TEST(Batcher, FullQueueIsRefusedQuickly) {
  FakeBackend backend(/*hold_first=*/true);
  Batcher batcher(backend.fn(), options(8192, 128, 0, /*max_queue=*/4));
  auto blocker = batcher.submit({sentence(0, 2)}, beam(1));
  ASSERT_TRUE(backend.wait_entered(1));  // the blocker left the queue; the worker is busy
  auto queued = batcher.submit({sentence(1, 2), sentence(2, 2), sentence(3, 2)}, beam(1));
  EXPECT_EQ(batcher.queued_sentences(), 3u);
  const Clock::time_point start = Clock::now();
  try {
    batcher.submit({sentence(4, 2), sentence(5, 2)}, beam(1));
    FAIL() << "accepted beyond max_queue_sentences";
  } catch (const nmt::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("batching.max_queue_sentences = 4"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(ms_since(start), 50.0);
  auto fits = batcher.submit({sentence(6, 2)}, beam(1));  // exactly fills the queue
  backend.release();
  EXPECT_TRUE(batcher.wait(queued).ok);
  EXPECT_TRUE(batcher.wait(fits).ok);
  EXPECT_TRUE(batcher.wait(blocker).ok);
}

TEST(Batcher, CancelledWorkNeverEntersABatch) {
  FakeBackend backend(/*hold_first=*/true);
  Batcher batcher(backend.fn(), options(8192, 128, 0));
  auto blocker = batcher.submit({sentence(0, 2)}, beam(1));
  ASSERT_TRUE(backend.wait_entered(1));
  auto cancelled = batcher.submit({sentence(11, 3), sentence(12, 3)}, beam(1));
  auto kept = batcher.submit({sentence(21, 3)}, beam(1));
  // The request thread sees its client go away while the sentences wait.
  const JobResult c = batcher.wait(cancelled, [] { return true; });
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.code, ErrorCode::kCancelled);
  backend.release();
  ASSERT_TRUE(batcher.wait(kept).ok);
  for (const Batch& b : backend.batches()) {
    for (const auto& ids : b.ids) EXPECT_TRUE(ids[0] != 11 && ids[0] != 12) << "cancelled sentence decoded";
  }
  EXPECT_EQ(batcher.queued_sentences(), 0u);
}

TEST(Batcher, ExpiredWorkNeverEntersABatch) {
  FakeBackend backend(/*hold_first=*/true);
  Batcher batcher(backend.fn(), options(8192, 128, 0));
  auto blocker = batcher.submit({sentence(0, 2)}, beam(1));
  ASSERT_TRUE(backend.wait_entered(1));
  const Clock::time_point start = Clock::now();
  auto expiring = batcher.submit({sentence(31, 3)}, beam(1), start + milliseconds(60));
  const JobResult r = batcher.wait(expiring);
  EXPECT_EQ(r.code, ErrorCode::kDeadlineExceeded);
  EXPECT_GE(ms_since(start), 59.0);
  EXPECT_LT(ms_since(start), 1000.0);  // answered at its deadline, not when the worker frees up
  backend.release();
  ASSERT_TRUE(batcher.wait(blocker).ok);
  auto after = batcher.submit({sentence(32, 3)}, beam(1));
  ASSERT_TRUE(batcher.wait(after).ok);
  for (const Batch& b : backend.batches()) {
    for (const auto& ids : b.ids) EXPECT_NE(ids[0], 31) << "expired sentence decoded";
  }
}

TEST(Batcher, CancellationReachesTheDecoder) {
  FakeBackend backend;
  backend.set_steps(100, 10);  // a 1 s batch unless sentences are dropped
  Batcher batcher(backend.fn(), options(8192, 128, 20));
  const Clock::time_point start = Clock::now();
  auto expiring = batcher.submit({sentence(1, 3)}, beam(1), start + milliseconds(100));
  auto kept = batcher.submit({sentence(2, 3)}, beam(1));
  std::atomic<bool> client_gone{false};
  auto cancelled = batcher.submit({sentence(3, 3)}, beam(1));
  ASSERT_TRUE(backend.wait_entered(1));
  client_gone = true;
  const JobResult c = batcher.wait(cancelled, [&] { return client_gone.load(); });
  EXPECT_EQ(c.code, ErrorCode::kCancelled);
  const JobResult e = batcher.wait(expiring);
  EXPECT_EQ(e.code, ErrorCode::kDeadlineExceeded);
  const JobResult k = batcher.wait(kept);
  ASSERT_TRUE(k.ok) << k.message;
  ASSERT_EQ(backend.batches().size(), 1u);
  EXPECT_EQ(backend.batches()[0].ids.size(), 3u);  // all three were decoding together
  EXPECT_EQ(backend.dropped(), 2);                  // and two left it mid-decoding
}

TEST(Batcher, DifferentOptionsAreNeverMixed) {
  FakeBackend backend(/*hold_first=*/true);
  Batcher batcher(backend.fn(), options(8192, 128, 0));
  auto blocker = batcher.submit({sentence(0, 2)}, beam(1));
  ASSERT_TRUE(backend.wait_entered(1));
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 12; ++i) {
    nmt::DecodeOptions o = beam(1 + i % 3);      // the tag below encodes the beam
    if (i % 4 == 0) o.length_penalty = 0.5f;    // tag + 100
    const int tag = o.beam_size + (i % 4 == 0 ? 100 : 0);
    jobs.push_back(batcher.submit({sentence(tag, 4), sentence(tag, 5)}, o));
  }
  backend.release();
  for (auto& j : jobs) ASSERT_TRUE(batcher.wait(j).ok);
  const std::vector<Batch> batches = backend.batches();
  EXPECT_GE(batches.size(), 7u);  // 6 distinct option sets + the blocker
  for (size_t b = 1; b < batches.size(); ++b) {
    const int expect = batches[b].options.beam_size + (batches[b].options.length_penalty == 0.5f ? 100 : 0);
    for (const auto& ids : batches[b].ids) EXPECT_EQ(ids[0], expect) << "batch " << b << " mixes options";
  }
}

TEST(Batcher, BackendErrorsFailTheBatchWithTheirCode) {
  FakeBackend backend;
  backend.set_throw();
  Batcher batcher(backend.fn(), options(8192, 128, 0));
  const JobResult r = batcher.wait(batcher.submit({sentence(1, 3)}, beam(1)));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(r.message, "out of device memory");
}

TEST(Batcher, StopFinishesQueuedWork) {
  FakeBackend backend;
  auto batcher = std::make_unique<Batcher>(backend.fn(), options(8192, 128, 10000));
  auto job = batcher->submit({sentence(1, 3)}, beam(1));
  const Clock::time_point start = Clock::now();
  batcher->stop();
  EXPECT_LT(ms_since(start), 2000.0);  // did not sit out max_wait_ms
  const JobResult r = batcher->wait(job);
  EXPECT_TRUE(r.ok);
  EXPECT_THROW(batcher->submit({sentence(2, 3)}, beam(1)), nmt::Error);
}

// With two translators, two batches run at the same time: each worker drives its own.
TEST(Batcher, WorkersRunBatchesConcurrently) {
  std::atomic<int> running{0}, most{0};
  auto slow = [&](const std::vector<std::vector<int>>& ids, const nmt::DecodeOptions&,
                  nmt::BatchStats*, const nmt::CancelFn&) {
    const int now = ++running;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    --running;
    return std::vector<nmt::Translation>(ids.size());
  };
  nmt::server::BatchingOptions o;
  o.max_batch_sentences = 1;  // one sentence per batch: two requests need two batches
  nmt::server::Batcher batcher({slow, slow}, o);
  auto a = batcher.submit({{5, 0}}, nmt::DecodeOptions{});
  auto b = batcher.submit({{6, 0}}, nmt::DecodeOptions{});
  EXPECT_TRUE(batcher.wait(a).ok);
  EXPECT_TRUE(batcher.wait(b).ok);
  EXPECT_EQ(most.load(), 2);
}
