#pragma once
// Sampling on a real engine, shared by the CPU test (tests/model/decoding/test_sampling_model.cc)
// and the CUDA one (tests/engine/controls/test_sampling_cuda.cc): the model's first-step logits for a
// source, straight from the engine; the first tokens that n seeded sentences draw through a
// decode loop; the mixed load of sampling, greedy and beam sentences.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/decode_options.h"
#include "model/decoding/engine.h"
#include "model/decoding/controls/sampler.h"
#include "tests/support/conformance/conformance.h"

namespace nmt::test {

// The logits of the first decoder step of `source` (StepGroup::return_logits), and the masks
// the engines apply there.
inline std::vector<float> first_step_logits(Engine& engine, const ModelConfig& config, const std::vector<int>& source) {
  engine.reserve({1, 1, int(source.size())});
  engine.encode({{&source, 0}});
  StepInput in;
  in.groups.push_back({0, 0, 1, 1, false, false, -1, config.forced_bos_id});
  in.groups.back().return_logits = true;
  in.tokens = {config.decoder_start_id};
  in.cache_rows = {0};
  in.parent_rows = {0};
  in.running_scores = {0.f};
  StepOutput out;
  engine.step(in, &out);
  engine.release(0, {0});
  return out.logits;
}

inline SampleMasks first_step_masks(const ModelConfig& config) {
  SampleMasks m;
  m.pad_id = config.mask_pad ? config.pad_id : -1;
  m.eos_id = config.eos_id;
  m.forced_token = config.forced_bos_id;
  return m;
}

inline DecodeOptions sampling_options(const SamplingParams& p, uint64_t seed, int num_hypotheses = 1) {
  DecodeOptions o;
  o.beam_size = 1;
  o.num_hypotheses = num_hypotheses;
  o.sampling_topk = p.topk;
  o.sampling_topp = p.topp;
  o.sampling_temperature = p.temperature;
  o.has_seed = true;
  o.seed = seed;
  return o;
}

// How often each token came first in n sentences of `source` seeded 0..n-1, decoded two
// tokens long through decode loops of `batch` sentences.
inline std::vector<int> first_token_counts(Engine& engine, const ModelConfig& config, const std::vector<int>& source,
                                           const SamplingParams& p, int n, int batch = 2000) {
  std::vector<int> counts(size_t(engine.vocab_size()), 0);
  for (int first = 0; first < n; first += batch) {
    const int m = std::min(batch, n - first);
    std::vector<DecodeOptions> options;
    for (int i = 0; i < m; ++i) {
      options.push_back(sampling_options(p, uint64_t(first + i)));
      options.back().max_decoding_length = 2;
    }
    for (const Translation& t : decode_ids(engine, config, std::vector<std::vector<int>>(size_t(m), source), options))
      ++counts.at(size_t(t.hypotheses.at(0).ids.at(0)));
  }
  return counts;
}

// A mixed load over `sources`: per sentence, in turn, seeded sampling (one sample, then three
// samples with top-k and top-p), greedy, beam 4 and sampling at a temperature.
inline std::vector<DecodeOptions> mixed_options(size_t n) {
  std::vector<DecodeOptions> out;
  for (size_t i = 0; i < n; ++i) {
    DecodeOptions o;
    switch (i % 5) {
      case 0: o = sampling_options({0, 1.f, 1.f}, 100 + i); break;
      case 1: o = sampling_options({20, 0.9f, 1.f}, 200 + i, 3); break;
      case 2: o.beam_size = 1; break;
      case 3: o.beam_size = 4; o.num_hypotheses = 2; break;
      default: o = sampling_options({0, 1.f, 0.7f}, 300 + i, 2); break;
    }
    o.max_decoding_length = 40;
    out.push_back(o);
  }
  return out;
}

}  // namespace nmt::test
