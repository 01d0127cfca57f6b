#include "model/cuda/step_layout.h"

namespace nmt::cuda {

int bucket(int n) {
  int b = 1;
  while (b < n) b = b < 4 ? b + 1 : ((b & (b - 1)) == 0 ? b / 2 * 3 : b / 3 * 4);
  return b;
}

StepShape shape_of(const std::vector<StepGroup>& groups) {
  StepShape s;
  for (const StepGroup& g : groups) {
    if (s.runs.empty() || s.runs.back().beam != g.beam || s.runs.back().k != g.k)
      s.runs.push_back(Run{g.beam, g.k});
    ++s.runs.back().sentences;
    s.alignments = s.alignments || g.alignments;
  }
  for (Run& r : s.runs) {
    r.padded = bucket(r.sentences);
    r.first_row = s.rows;
    r.first_sentence = s.sentences;
    r.first_output = s.outputs;
    s.rows += r.padded * r.beam;
    s.sentences += r.padded;
    s.outputs += r.padded * r.k;
  }
  return s;
}

bool has_edits(const StepInput& in) {
  if (!in.edit_begin.empty() && in.edit_begin.back() > 0) return true;
  for (const StepGroup& g : in.groups) {
    if (g.device_repetition()) return true;
  }
  return false;
}

}  // namespace nmt::cuda
