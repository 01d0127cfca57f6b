#pragma once
// Sampling one token of a row on the host, from the logits an engine returns for a sampling
// sentence (StepGroup::return_logits). Shared by both engines, so that a seeded sentence
// draws the same tokens on each (where their float32 logits agree). docs/decoding.md,
// "Sampling".
//
// The distribution is transformers' `_sample` (generation/utils.py, 5.x): the logits
// processors' masks on the raw logits (pad, min length's EOS, forced EOS / first token, the
// same the engines' top-k applies), then its warpers in the order `_get_logits_processor`
// appends them: TemperatureLogitsWarper (scores / temperature), TopKLogitsWarper (every token
// below the k-th largest score dropped: ties at the k-th kept), TopPLogitsWarper (ascending
// sort, softmax, cumulative sum; tokens whose cumulative probability is <= 1 - top_p dropped,
// the likeliest always kept); then softmax and one draw. torch's RNG is not reproduced: the
// draw is the inverse CDF at a uniform number from a counter-based generator keyed by (seed,
// hypothesis, step), so that a sentence's draws depend on nothing else in the loop.
#include <cstdint>
#include <vector>

namespace nmt {

struct SamplingParams {
  int topk = 0;             // 0: no top-k
  float topp = 1.f;         // 1: no top-p
  float temperature = 1.f;  // > 0
};

// The masks the engines' top-k applies (cpu/candidates.h RowMasks, kernels::TopkMasks).
struct SampleMasks {
  int pad_id = -1;  // < 0: none
  int eos_id = -1;
  bool mask_eos = false;
  bool force_eos = false;  // EOS has log-prob 0, every other token -inf (wins over forced_token)
  int forced_token = -1;   // >= 0: likewise for this token
};

// A uniform number in [0, 1) for draw `step` of hypothesis `hypothesis` of a sentence seeded
// `seed`: splitmix64's finalizer over the three, 53 bits.
double sample_uniform(uint64_t seed, int hypothesis, int step);

struct Sample {
  int token = 0;
  float logprob = 0.f;  // the model's log-prob of the token, masks applied, before the warpers
};

class Sampler {
 public:
  // The token at uniform number u of the warped distribution of the row's logits.
  Sample draw(const float* logits, int vocab, const SampleMasks& masks, const SamplingParams& params, double u);
  // The warped distribution itself, probabilities per token (for the tests).
  std::vector<double> distribution(const float* logits, int vocab, const SampleMasks& masks,
                                   const SamplingParams& params);

 private:
  // The kept tokens and their unnormalized weights exp(z - max z), in the order the draw
  // walks them; returns their sum. The row's log-sum-exp of the masked logits in *lse.
  double warp(const float* logits, int vocab, const SampleMasks& masks, const SamplingParams& params, double* lse);

  std::vector<int> tokens_;      // kept tokens
  std::vector<double> weights_;  // theirs
  std::vector<double> z_;        // scaled logits per token (-inf: masked)
};

}  // namespace nmt
