#pragma once
// A decode loop over the scripted engine (tests/support/scripted_engine.h), shared by the
// host search's tests (test_beam_search.cc) and the decode loop's (test_decode_loop.cc).
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model/decoding/decode_loop.h"
#include "tests/support/scripted_engine.h"

namespace nmt::test {

inline constexpr int kEos = ScriptedEngine::kEos;
inline const ModelConfig kConfig = ScriptedEngine::config();

inline DecodeOptions beam(int k) {
  DecodeOptions o;
  o.beam_size = k;
  return o;
}

// Runs sentences (eos_step values) through a fresh loop, all admitted at once.
inline std::map<uint64_t, FinishedSentence> run(ScriptedEngine& e, const std::vector<int>& eos_steps,
                                                const DecodeOptions& o, EngineCapacity cap = {16, 64, 4},
                                                int follow_rows = DecodeLoop::kDefaultFollowRows) {
  DecodeLoop loop(e, kConfig, cap);
  loop.set_follow_rows(follow_rows);
  std::vector<LoopSentence> in;
  for (size_t i = 0; i < eos_steps.size(); ++i) in.push_back({i, {eos_steps[i], kEos}, o});
  loop.admit(in);
  std::map<uint64_t, FinishedSentence> out;
  while (!loop.idle()) {
    for (auto& f : loop.step().finished) out[f.id] = std::move(f);
  }
  return out;
}

}  // namespace nmt::test
