#pragma once
// The device side of translation: the Transformer forward passes plus the per-step
// log-softmax and top-k over beam x vocab. The beam search bookkeeping (finished hypotheses,
// stopping) stays on the host in beam_search.cc and drives an Engine through this interface,
// so the CPU and CUDA engines share one decoding algorithm.
#include <cstddef>
#include <memory>
#include <vector>

namespace nmt {

struct StepInput {
  // Per alive row (rows = alive sentences x beam, sentence-major): the token fed at this step.
  const std::vector<int>* tokens = nullptr;
  // Per alive row: the old row this row continues (cache reorder, finished sentences leave).
  // Null on the first step (identity).
  const std::vector<int>* parent_rows = nullptr;
  // Per alive row: the running sum of log-probs, added to the new log-probs before top-k.
  const std::vector<float>* running_scores = nullptr;
  int step = 0;         // decoder position of `tokens` (0 = decoder start token)
  int beam = 1;         // rows per sentence
  int k = 1;            // candidates returned per sentence
  bool mask_eos = false;   // min_decoding_length not reached: EOS gets -inf
  bool force_eos = false;  // max length reached: EOS gets log-prob 0, everything else -inf
};

struct StepOutput {
  // [alive sentences x k], best first: running score + log p(token), and the candidate as
  // row_in_sentence * vocab + token.
  std::vector<float> scores;
  std::vector<int> candidates;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Encodes the sentences (unpadded ids, each ending in </s>) and resets the decoder state
  // for `beam` rows per sentence.
  virtual void encode(const std::vector<std::vector<int>>& source_ids, int beam) = 0;
  // One decoder step. After parent_rows is applied, sentence g of this step is the one whose
  // rows parent_rows[g * beam ...] came from.
  virtual void step(const StepInput& in, StepOutput* out) = 0;
  virtual int vocab_size() const = 0;
  // The encoder's float32 output of sentence i of the last encode(), [length, d_model]: for
  // tests and layer-by-layer debugging against the reference implementation.
  virtual std::vector<float> encoder_output(size_t sentence) const = 0;
  // Bytes of device memory held (0 on the CPU).
  virtual size_t memory_used() const { return 0; }
};

}  // namespace nmt
