#pragma once
// Which waiting sentences a decode loop admits between two of its steps (docs/data-flow.md), as a
// pure function of a plain snapshot: the model's queue, every loop's load and capacity, and
// the `batching:` options. The Scheduler takes the snapshot under its lock, asks, and does
// what the answer says; the rules live here alone, so that they are tested as tables
// (tests/server/scheduling/test_admission_policy.cc) without threads or clocks.
//
// The rules, in the order they apply:
// - Fill (loop_fill_sentences > 0, several loops): while the model's sentences (active and
//   queued) number at most the fill, a loop leaves the queue to a loop that holds more
//   sentences than it does and has room for all that wait. An idle loop that does so is told
//   to wait for the queue to spill (`defer`); a decoding one just admits nothing.
// - Delay: a decoding loop admits once the newcomers number a quarter of its sentences or it
//   has stepped max_admit_delay_steps times since its last admission; an idle loop at once.
// - Hold: a decoding loop whose admission fell due on the quarter holds it one more step while
//   newcomers are still arriving (some came since its previous decision), for at most as many
//   steps as an admission costs it (its measured admit_seconds / step_seconds, rounded down,
//   below max_admit_delay_steps). The sentences that finished in one step come back over a step
//   or two from closed-loop clients; admitted as they trickle in, each fragment costs an encode
//   and the fragments, of equal lengths, finish apart again (bench/history/server.md, runs 49
//   and 52: NLLB's 12 encoder layers at d_model 1024). A model whose admission adds less than a
//   step never holds: the quarter rule as before.
// - Room: oldest first while the loop has a free slot and the front sentence's beam in free
//   rows, within max_admit_tokens source tokens (at least one sentence). Strictly in the queue's
//   order (fair across tenants, fair_queue.h): a sentence that does not fit yet is not
//   overtaken.
// - Even shares: several loops beyond the fill (or fill 0) take at most their even share of
//   the model's sentences (active and queued), so that their steps stay alike in size.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/scheduling/scheduling_options.h"

namespace nmt::server {

// One waiting sentence, as the policy sees it.
struct QueuedSentence {
  int beam = 1;         // the cache rows it holds once admitted
  int64_t tokens = 0;   // its source length (</s> included)
};

// One decode loop of the model.
struct LoopLoad {
  int sentences = 0, rows = 0;                    // active now (another loop's: as of its last admission)
  int capacity_sentences = 0, capacity_rows = 0;  // its slots and cache rows

  // The hold (the deciding loop's own entry; the others' stay 0): its measured costs
  // (AdmissionCosts, 0 = not measured yet) and whether newcomers are still arriving.
  double step_seconds = 0;   // a step without an admission
  double admit_seconds = 0;  // what an admission adds to the steps it rides on
  size_t arrived = 0;        // sentences queued since the loop's previous decision
  int held_steps = 0;        // steps it has held an admission that was due
};

// The moving averages behind LoopLoad's step_seconds and admit_seconds, fed with the wall time
// of each step() of a decoding loop and whether it encoded newcomers. An encode rides on the
// step submitted with it, which a loop keeping two steps in flight collects in the next call:
// an admission's cost is the call that encoded and the one after it, less two plain steps.
// Windows that overlap another encode are dropped.
class AdmissionCosts {
 public:
  void step(double seconds, bool encoded);
  double step_seconds() const { return step_; }
  double admit_seconds() const { return admit_; }

 private:
  double step_ = 0, admit_ = 0;
  double window_ = 0;    // the encoding call's seconds, while its window is open
  bool open_ = false;
};

struct AdmissionSnapshot {
  std::vector<LoopLoad> loops;        // every loop of the model
  int active_sentences = 0;           // in all the loops together (the scheduler's count)
  std::vector<QueuedSentence> queue;  // the waiting sentences, in the queue's (fair) order
};

struct AdmissionDecision {
  size_t admit = 0;    // this many from the queue's front
  bool defer = false;  // an idle loop leaves them to a fuller one: wait for a spill
  bool held = false;   // due, but held for newcomers still arriving (the hold)
};

// The decision for loop `loop` (an index into snapshot.loops), which has stepped
// `steps_since_admit` times since its last admission.
AdmissionDecision decide_admission(const AdmissionSnapshot& snapshot, int loop, int steps_since_admit,
                                   const SchedulingOptions& options);

// Whether the model's sentences (active and queued) are within loop_fill_sentences (> 0):
// then one loop takes them all.
bool within_fill(size_t active_sentences, size_t queued, const SchedulingOptions& options);

// Whether loop `loop` (-1: a loop that would be woken for new work) should leave the queue to
// a decoding loop that holds more sentences than it does and has room for every waiting
// sentence, within the fill (several loops only).
bool leaves_to_a_fuller_loop(const AdmissionSnapshot& snapshot, int loop, const SchedulingOptions& options);

}  // namespace nmt::server
