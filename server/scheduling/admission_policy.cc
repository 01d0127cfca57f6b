#include "server/scheduling/admission_policy.h"

#include <algorithm>

namespace nmt::server {

bool within_fill(size_t active_sentences, size_t queued, const SchedulingOptions& options) {
  const int fill = options.loop_fill_sentences;
  return fill > 0 && active_sentences + queued <= size_t(fill);
}

bool leaves_to_a_fuller_loop(const AdmissionSnapshot& s, int loop, const SchedulingOptions& options) {
  if (s.loops.size() < 2 || !within_fill(size_t(s.active_sentences), s.queue.size(), options)) return false;
  const int fill = options.loop_fill_sentences;
  const int own = loop < 0 ? 0 : s.loops[size_t(loop)].sentences;
  int rows = 0;
  for (const QueuedSentence& q : s.queue) rows += q.beam;
  for (size_t j = 0; j < s.loops.size(); ++j) {
    const LoopLoad& other = s.loops[j];
    if (int(j) == loop || other.sentences <= own) continue;
    if (std::min(fill, other.capacity_sentences) - other.sentences >= int(s.queue.size()) &&
        other.capacity_rows - other.rows >= rows) {
      return true;
    }
  }
  return false;
}

AdmissionDecision decide_admission(const AdmissionSnapshot& s, int loop, int steps_since_admit,
                                   const SchedulingOptions& options) {
  AdmissionDecision decision;
  if (s.queue.empty()) return decision;
  const LoopLoad& own = s.loops[size_t(loop)];
  const bool idle = own.sentences == 0;
  // A decoding loop leaves newcomers to a fuller one too: two loops that came to split the
  // model's sentences (an idle loop woken in a race with the running loop's finishes) both
  // kept admitting, and every round cost two GPU steps; this way the emptier one drains.
  if (leaves_to_a_fuller_loop(s, loop, options)) {
    decision.defer = idle;
    return decision;
  }
  // A quarter: measured on H100 at 64 and 256 clients against an eighth, a sixteenth and
  // every step (the last the slowest: 7.9k against 8.7k sentences/s with 64 clients). On the
  // NLLB-600M shape it costs little: an admission adds ~0.1 ms to 1.5 ms steps and a sentence
  // waits 1.5 ms in the queue on average (bench/history/server.md, run 52).
  const bool due = idle || s.queue.size() * 4 >= size_t(own.sentences) ||
                   steps_since_admit >= options.max_admit_delay_steps;
  if (!due) return decision;
  int slots = own.capacity_sentences - own.sentences;
  int rows = own.capacity_rows - own.rows;
  if (s.loops.size() > 1 && !within_fill(size_t(s.active_sentences), s.queue.size(), options)) {
    // Without the share the loop whose admission fell due first took up to its whole
    // capacity, and the sentences in the fuller loop waited on slower steps (the tail at 256
    // clients).
    const size_t total = size_t(s.active_sentences) + s.queue.size();
    const int share = int((total + s.loops.size() - 1) / s.loops.size()) - own.sentences;
    slots = std::min(slots, std::max(share, 0));  // an idle loop's share is >= 1
  }
  int64_t tokens = 0;
  for (const QueuedSentence& q : s.queue) {
    if (slots < 1 || rows < q.beam) break;
    if (decision.admit > 0 && tokens + q.tokens > options.max_admit_tokens) break;
    slots -= 1;
    rows -= q.beam;
    tokens += q.tokens;
    ++decision.admit;
  }
  return decision;
}

}  // namespace nmt::server
