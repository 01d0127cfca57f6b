// Two CUDA engines on one device, driven at once from two threads, as a server's decode loops
// drive theirs. The engines of a device enqueue on one shared stream (model/cuda/
// device_stream.h) and capture their step graphs on private streams: a capture must not take
// in the other engine's work, and an engine must wait for its own work only. Every
// translation must equal the sentence translated alone (float32: same tokens, same score).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
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

}  // namespace
