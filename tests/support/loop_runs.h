#pragma once
// What the mixed-load tests of the decoding controls share: sentences run through one decode
// loop of a Translator, admitted all at once or one a step (so that sentences with different
// controls share steps at different positions), each finished translation by its id.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "model/decoding/decode_loop.h"
#include "model/translator.h"

namespace nmt::test {

// `batch` through a loop of `translator` sized for all of it (rows: the sentences' rows
// together), one newcomer a step when `stagger`, else all at once.
inline std::map<uint64_t, Translation> run_loop(Translator& translator, const std::vector<LoopSentence>& batch,
                                                bool stagger) {
  int rows = 0;
  for (const LoopSentence& s : batch) rows += s.options.rows();
  std::map<uint64_t, Translation> got;
  auto loop = translator.make_loop({int(batch.size()), rows, 64});
  size_t next = 0;
  while (next < batch.size() || !loop->idle()) {
    const size_t take = stagger ? std::min(next + 1, batch.size()) : batch.size();
    if (next < take) {
      loop->admit(std::vector<LoopSentence>(batch.begin() + long(next), batch.begin() + long(take)));
      next = take;
    }
    for (FinishedSentence& f : loop->step().finished) got[f.id] = f.translation;
  }
  return got;
}

}  // namespace nmt::test
