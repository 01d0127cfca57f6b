// nmt-bench-decode-loop: the decode loop's host work per sentence and step, against an engine
// that computes nothing (each step returns fixed candidates at once). At large batches this
// work runs between two GPU steps, so it bounds the engine's offline throughput on a slow
// host; this measures it on any machine.
//
//   nmt-bench-decode-loop [--sentences 1024] [--beam 4] [--steps 32] [--repeat 5]
//
// Prints one "RESULT {json}" line: microseconds per sentence-step (best of --repeat passes).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "model/decoding/decode_loop.h"

using namespace nmt;

namespace {

// Candidates of every group at once: beam b's token 3 + j, each candidate from beam j % beam,
// scores descending. No EOS: sentences run to their max_decoding_length.
class NullEngine : public Engine {
 public:
  static constexpr int kVocab = 32000;
  void reserve(const EngineCapacity& c) override { cap_ = c; }
  EngineCapacity capacity() const override { return cap_; }
  void encode(const std::vector<EncodeItem>&) override {}
  void step(const StepInput& in, StepOutput* out) override {
    out->scores.clear();
    out->candidates.clear();
    size_t row = 0;
    for (const StepGroup& g : in.groups) {
      for (int j = 0; j < g.k; ++j) {
        out->scores.push_back(in.running_scores[row] - 0.1f * float(j + 1));
        out->candidates.push_back((j % g.beam) * kVocab + 3 + j);
      }
      row += size_t(g.beam);
    }
  }
  int vocab_size() const override { return kVocab; }
  std::vector<float> encoder_output(size_t) const override { return {}; }

 private:
  EngineCapacity cap_;
};

}  // namespace

int main(int argc, char** argv) {
  int sentences = 1024, beam = 4, steps = 32, repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::stoi(argv[i + 1]);
    if (k == "--sentences") sentences = v;
    else if (k == "--beam") beam = v;
    else if (k == "--steps") steps = v;
    else if (k == "--repeat") repeat = v;
    else { std::cerr << "unknown option " << k << "\n"; return 2; }
  }
  ModelConfig config;
  config.vocab_size = config.target_vocab_size = NullEngine::kVocab;
  config.eos_id = 0;
  config.pad_id = 1;
  config.decoder_start_id = 1;
  config.max_positions = 1024;
  DecodeOptions o;
  o.beam_size = beam;
  o.max_decoding_length = steps;
  NullEngine engine;
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    DecodeLoop loop(engine, config, {sentences, sentences * beam, 8});
    std::vector<LoopSentence> in;
    for (int s = 0; s < sentences; ++s) in.push_back({uint64_t(s), {5, 6, 7, 0}, o});
    loop.admit(std::move(in));
    const auto t0 = std::chrono::steady_clock::now();
    while (!loop.idle()) loop.step();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::cout << "RESULT {\"bench\":\"decode_loop_host\",\"sentences\":" << sentences << ",\"beam\":" << beam
            << ",\"steps\":" << steps << ",\"us_per_sentence_step\":" << best * 1e6 / (double(sentences) * steps)
            << "}" << std::endl;
  return 0;
}
