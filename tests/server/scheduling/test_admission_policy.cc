// The admission policy (server/scheduling/admission_policy.h) as tables: a snapshot of the
// queue and the loops, the decision. No threads, no clocks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/scheduling/admission_policy.h"

using namespace nmt::server;

namespace {

// A loop holding `sentences` and `rows`, of `slots` slots and `capacity_rows` rows.
LoopLoad loop(int sentences, int rows, int slots = 8, int capacity_rows = 32) {
  return {sentences, rows, slots, capacity_rows};
}

// `n` waiting sentences of one beam and source length.
std::vector<QueuedSentence> waiting(int n, int beam = 1, int64_t tokens = 4) {
  return std::vector<QueuedSentence>(size_t(n), QueuedSentence{beam, tokens});
}

std::vector<QueuedSentence> operator+(std::vector<QueuedSentence> a, const std::vector<QueuedSentence>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Options {
  int admit_tokens = 2048, delay_steps = 8, fill = 512;
};

struct Row {
  std::string name;
  std::vector<LoopLoad> loops;
  std::vector<QueuedSentence> queue;
  int loop = 0;               // the one deciding
  int steps_since_admit = 0;  // its steps since its last admission
  Options options;
  size_t admit;               // expected
  bool defer;                 // expected
};

SchedulingOptions scheduling(const Options& o) {
  SchedulingOptions s;
  s.max_admit_tokens = o.admit_tokens;
  s.max_admit_delay_steps = o.delay_steps;
  s.loop_fill_sentences = o.fill;
  return s;
}

AdmissionSnapshot snapshot(const Row& row) {
  AdmissionSnapshot s;
  s.loops = row.loops;
  for (const LoopLoad& l : row.loops) s.active_sentences += l.sentences;
  s.queue = row.queue;
  return s;
}

}  // namespace

TEST(AdmissionPolicy, OneLoopAdmitsOldestFirstWithinSlotsRowsAndTokens) {
  const std::vector<Row> rows = {
      {"nothing waits", {loop(0, 0)}, {}, 0, 0, {}, 0, false},
      {"an idle loop takes all that fit", {loop(0, 0)}, waiting(3), 0, 0, {}, 3, false},
      {"free slots bound it", {loop(0, 0, 2)}, waiting(5), 0, 0, {}, 2, false},
      {"free rows bound it: three beams of 3 in 10 rows", {loop(0, 0, 8, 10)}, waiting(4, 3), 0, 0, {}, 3, false},
      {"rows held by active sentences count", {loop(1, 4, 8, 10)}, waiting(4, 3), 0, 8, {}, 2, false},
      {"a front sentence that does not fit is not overtaken", {loop(1, 29, 8, 32)},
       waiting(1, 4) + waiting(3, 1), 0, 8, {}, 0, false},
      {"the token budget: 4 + 4 of 8", {loop(0, 0)}, waiting(3, 1, 4), 0, 0, {8}, 2, false},
      {"the token budget: 4 + 5 over 8", {loop(0, 0)}, waiting(1, 1, 4) + waiting(1, 1, 5), 0, 0, {8}, 1, false},
      {"one sentence over the token budget is still admitted", {loop(0, 0)}, waiting(2, 1, 20), 0, 0, {8}, 1, false},
      {"a full loop admits nothing", {loop(8, 8)}, waiting(4), 0, 8, {}, 0, false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const AdmissionDecision d = decide_admission(snapshot(row), row.loop, row.steps_since_admit, scheduling(row.options));
    EXPECT_EQ(d.admit, row.admit);
    EXPECT_EQ(d.defer, row.defer);
  }
}

TEST(AdmissionPolicy, ADecodingLoopAdmitsOnceNewcomersAreWorthAnEncode) {
  // 8 slots free beside the active ones in each row (capacity 16).
  const std::vector<Row> rows = {
      {"one newcomer for 8 decoding waits", {loop(8, 8, 16)}, waiting(1), 0, 0, {}, 0, false},
      {"two newcomers are a quarter of 8", {loop(8, 8, 16)}, waiting(2), 0, 0, {}, 2, false},
      {"two newcomers are under a quarter of 9", {loop(9, 9, 16)}, waiting(2), 0, 0, {}, 0, false},
      {"one newcomer, 7 steps of a delay of 8", {loop(8, 8, 16)}, waiting(1), 0, 7, {}, 0, false},
      {"one newcomer, 8 steps of a delay of 8", {loop(8, 8, 16)}, waiting(1), 0, 8, {}, 1, false},
      {"delay 1 admits after every step", {loop(8, 8, 16)}, waiting(1), 0, 1, {2048, 1}, 1, false},
      {"an idle loop admits at once", {loop(0, 0, 16)}, waiting(1), 0, 0, {}, 1, false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const AdmissionDecision d = decide_admission(snapshot(row), row.loop, row.steps_since_admit, scheduling(row.options));
    EXPECT_EQ(d.admit, row.admit);
    EXPECT_EQ(d.defer, row.defer);
  }
}

TEST(AdmissionPolicy, SeveralLoopsBeyondTheFillTakeEvenShares) {
  // Loops of 16 slots and 64 rows; fill 0 = even shares always.
  const std::vector<Row> rows = {
      {"16 for two idle loops: 8 each", {loop(0, 0, 16, 64), loop(0, 0, 16, 64)}, waiting(16), 0, 0, {2048, 8, 0}, 8,
       false},
      {"the share counts the sentences already active", {loop(2, 2, 16, 64), loop(6, 6, 16, 64)}, waiting(8), 0, 8,
       {2048, 8, 0}, 6, false},
      {"a loop over its share takes none", {loop(10, 10, 16, 64), loop(0, 0, 16, 64)}, waiting(2), 0, 8,
       {2048, 8, 0}, 0, false},
      {"an idle loop's share is at least one", {loop(0, 0, 16, 64), loop(5, 5, 16, 64)}, waiting(1), 0, 0,
       {2048, 8, 0}, 1, false},
      {"three loops: a third each, rounded up", {loop(0, 0, 16, 64), loop(0, 0, 16, 64), loop(0, 0, 16, 64)},
       waiting(10), 0, 0, {2048, 8, 0}, 4, false},
      {"beyond a fill of 16: shares", {loop(0, 0, 16, 64), loop(14, 14, 16, 64)}, waiting(4), 0, 0, {2048, 8, 16}, 4,
       false},
      {"beyond a fill of 16: the share bounds it", {loop(0, 0, 16, 64), loop(10, 10, 16, 64)}, waiting(12), 0, 0,
       {2048, 8, 16}, 11, false},
      {"one loop has no share", {loop(0, 0, 16, 64)}, waiting(16), 0, 0, {2048, 8, 0}, 16, false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const AdmissionDecision d = decide_admission(snapshot(row), row.loop, row.steps_since_admit, scheduling(row.options));
    EXPECT_EQ(d.admit, row.admit);
    EXPECT_EQ(d.defer, row.defer);
  }
}

TEST(AdmissionPolicy, WithinTheFillALoopLeavesNewcomersToAFullerOne) {
  // Two loops of 16 slots and 32 rows under a fill of 16.
  const Options fill16{2048, 8, 16};
  const std::vector<Row> rows = {
      {"idle beside a decoding loop with room: defers", {loop(0, 0, 16), loop(4, 4, 16)}, waiting(3), 0, 0, fill16, 0,
       true},
      {"emptier and decoding: admits nothing, no wait", {loop(2, 2, 16), loop(4, 4, 16)}, waiting(3), 0, 8, fill16, 0,
       false},
      {"the fuller loop itself admits them", {loop(6, 6, 16), loop(4, 4, 16)}, waiting(3), 0, 8, fill16, 3, false},
      {"equal loads: neither leaves", {loop(4, 4, 16), loop(4, 4, 16)}, waiting(2), 0, 8, fill16, 2, false},
      {"the fuller loop has too few slots for all", {loop(0, 0, 16), loop(4, 4, 8)}, waiting(5), 0, 0, fill16, 5,
       false},
      {"the fuller loop has too few rows for all", {loop(0, 0, 16), loop(4, 30, 16)}, waiting(3), 0, 0, fill16, 3,
       false},
      {"the fill bounds the fuller loop's room: 6 - 4 for 2", {loop(0, 0, 16), loop(4, 4, 16)}, waiting(2), 0, 0,
       {2048, 8, 6}, 0, true},
      {"past a fill of 6 the loops share instead", {loop(0, 0, 16), loop(4, 4, 16)}, waiting(3), 0, 0, {2048, 8, 6}, 3,
       false},
      {"fill 0: never left to another loop", {loop(0, 0, 16), loop(4, 4, 16)}, waiting(2), 0, 0, {2048, 8, 0}, 2,
       false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const AdmissionDecision d = decide_admission(snapshot(row), row.loop, row.steps_since_admit, scheduling(row.options));
    EXPECT_EQ(d.admit, row.admit);
    EXPECT_EQ(d.defer, row.defer);
  }
}

TEST(AdmissionPolicy, WithinFill) {
  struct Case {
    size_t active, queued;
    int fill;
    bool within;
  };
  for (const Case& c : std::vector<Case>{{0, 0, 0, false}, {3, 5, 8, true}, {4, 5, 8, false}, {0, 1, 1, true},
                                         {0, 2, 1, false}}) {
    SchedulingOptions o;
    o.loop_fill_sentences = c.fill;
    EXPECT_EQ(within_fill(c.active, c.queued, o), c.within) << c.active << " + " << c.queued << " of " << c.fill;
  }
}

TEST(AdmissionPolicy, NewWorkWakesNoLoopWhenADecodingOneTakesIt) {
  // leaves_to_a_fuller_loop(-1): submit() skips the wake-up.
  struct Case {
    std::string name;
    std::vector<LoopLoad> loops;
    int queued;
    bool leaves;
  };
  const std::vector<Case> cases = {
      {"one loop: it must be woken", {loop(3, 3, 16)}, 2, false},
      {"a decoding loop with room", {loop(0, 0, 16), loop(3, 3, 16)}, 2, true},
      {"every loop idle", {loop(0, 0, 16), loop(0, 0, 16)}, 2, false},
      {"the decoding loop is short of slots", {loop(0, 0, 16), loop(3, 3, 4)}, 2, false},
  };
  SchedulingOptions o;
  o.loop_fill_sentences = 16;
  for (const Case& c : cases) {
    Row row{c.name, c.loops, waiting(c.queued), -1, 0, {}, 0, false};
    EXPECT_EQ(leaves_to_a_fuller_loop(snapshot(row), -1, o), c.leaves) << c.name;
  }
}
