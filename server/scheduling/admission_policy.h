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
};

struct AdmissionSnapshot {
  std::vector<LoopLoad> loops;        // every loop of the model
  int active_sentences = 0;           // in all the loops together (the scheduler's count)
  std::vector<QueuedSentence> queue;  // the waiting sentences, in the queue's (fair) order
};

struct AdmissionDecision {
  size_t admit = 0;    // this many from the queue's front
  bool defer = false;  // an idle loop leaves them to a fuller one: wait for a spill
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
