// Two CUDA engines on one device, driven at once from two threads, as a server's decode loops
// drive theirs. The engines of a device enqueue on one shared stream (model/cuda/
// device_stream.h) and capture their step graphs on private streams: a capture must not take
// in the other engine's work, and an engine must wait for its own work only. Every
// translation must equal the sentence translated alone (float32: same tokens, same score).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model/cuda_engine.h"
#include "model/decoding/decode_options.h"
#include "model/translator.h"
#include "tests/support/golden.h"

using namespace nmt;

namespace {

// Our own sentences of different lengths: the loops' sentences leave at different steps, so
// the step shapes (and the graphs captured for them) change while the other engine runs.
const std::vector<std::string> kSentences = {
    "A man rides a bicycle.",
    "Two children are playing football on a green field next to a small river.",
    "The dog sleeps.",
    "A woman in a red dress is singing on a stage while the band plays behind her.",
    "People walk through the market.",
    "An old man reads a newspaper on a wooden bench in the park.",
};

std::unique_ptr<Translator> load() {
  TranslatorOptions o;
  o.device = Device::kCuda;
  o.precision = Precision::kFloat32;
  return Translator::load(test::demo_model_dir(), o);
}

TEST(CudaEnginesConcurrent, TwoEnginesOnOneDeviceTranslateAsAlone) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not tested here";
  auto first = load(), second = load();
  DecodeOptions d;
  d.beam_size = 4;
  d.return_scores = true;
  std::vector<Translation> alone;
  for (const std::string& s : kSentences) alone.push_back(first->translate({s}, d).at(0));

  // Round r translates the sentences from r % n on, r % 4 + 1 of them at once.
  auto drive = [&](Translator* t, int offset, std::vector<std::string>* failures) {
    const size_t n = kSentences.size();
    for (int r = 0; r < 24; ++r) {
      std::vector<std::string> batch;
      std::vector<size_t> which;
      for (int i = 0; i < r % 4 + 1; ++i) {
        which.push_back((size_t(r + offset) + size_t(i)) % n);
        batch.push_back(kSentences[which.back()]);
      }
      std::vector<Translation> got;
      try {
        got = t->translate(batch, d);
      } catch (const std::exception& e) {
        failures->push_back("round " + std::to_string(r) + ": " + e.what());
        return;
      }
      for (size_t i = 0; i < got.size(); ++i) {
        const Hypothesis& a = alone[which[i]].hypotheses.at(0);
        const Hypothesis& b = got[i].hypotheses.at(0);
        if (a.ids != b.ids || std::fabs(a.score - b.score) > 1e-4f)
          failures->push_back("round " + std::to_string(r) + ": \"" + batch[i] + "\" -> \"" + b.text +
                              "\" (" + std::to_string(b.score) + "), alone \"" + a.text + "\" (" +
                              std::to_string(a.score) + ")");
      }
    }
  };
  std::vector<std::string> failures_first, failures_second;
  std::thread a(drive, first.get(), 0, &failures_first);
  std::thread b(drive, second.get(), 3, &failures_second);
  a.join();
  b.join();
  for (const auto* f : {&failures_first, &failures_second})
    for (const std::string& line : *f) ADD_FAILURE() << line;
}

// A model loading and unloading beside a running one, as a server's model reload does: the
// new engine's weight upload (synchronous copies, a device synchronize) and the old one's frees
// must not fall inside the running engine's graph captures, which CUDA would invalidate
// (model/cuda/device/capture_gate.h). The running engine sees new step shapes all along
// (beams 1-5, 1-6 sentences, each shape twice: the second sight captures), and each of its
// translations must equal the sentence's at that beam translated before.
TEST(CudaEnginesConcurrent, ALoadAndUnloadBesideARunningEngineFailsNoStep) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible (CPU-only build or no GPU): the CUDA engine is not tested here";
  auto running = load();
  const size_t n = kSentences.size();
  std::map<std::pair<int, size_t>, std::vector<int>> alone;  // (beam, sentence) -> ids
  auto options = [](int beam) {
    DecodeOptions d;
    d.beam_size = beam;
    return d;
  };
  for (int beam = 1; beam <= 5; ++beam)
    for (size_t i = 0; i < n; ++i) alone[{beam, i}] = running->translate({kSentences[i]}, options(beam)).at(0).hypotheses.at(0).ids;

  std::atomic<bool> done{false};
  std::vector<std::string> failures, reload_failures;
  int reloads = 0;
  std::thread reloader([&] {
    while (!done.load()) {
      try {
        auto fresh = load();  // uploads its weights while the other engine steps
        fresh->translate({kSentences[0]}, options(2));
        ++reloads;
      } catch (const std::exception& e) {
        reload_failures.push_back(e.what());
        return;
      }  // and frees them here
    }
  });
  for (int beam = 1; beam <= 5 && failures.empty(); ++beam) {
    for (size_t count = 2; count <= n && failures.empty(); ++count) {
      for (int sight = 0; sight < 2; ++sight) {
        std::vector<std::string> batch(kSentences.begin(), kSentences.begin() + long(count));
        try {
          const std::vector<Translation> got = running->translate(batch, options(beam));
          for (size_t i = 0; i < count; ++i)
            if (got.at(i).hypotheses.at(0).ids != alone[{beam, i}])
              failures.push_back("beam " + std::to_string(beam) + ", " + std::to_string(count) + " sentences: \"" +
                                 batch[i] + "\" -> \"" + got[i].hypotheses[0].text + "\", not as alone");
        } catch (const std::exception& e) {
          failures.push_back("beam " + std::to_string(beam) + ", " + std::to_string(count) + " sentences: " + e.what());
        }
      }
    }
  }
  done = true;
  reloader.join();
  for (const std::string& line : failures) ADD_FAILURE() << line;
  for (const std::string& line : reload_failures) ADD_FAILURE() << "the model loaded beside: " << line;
  EXPECT_GT(reloads, 0) << "no load and unload overlapped the running engine's steps";
}

}  // namespace
