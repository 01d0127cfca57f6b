#pragma once
// The `batching:` section of the config: the capacity of each decode loop and the queue in
// front of them (server/scheduler.h).

namespace nmt::server {

struct SchedulingOptions {
  int max_active_sentences = 256;  // sentence slots of each decode loop
  int max_active_rows = 1024;      // KV-cache rows of each loop (a sentence holds beam rows)
  // Source tokens encoded between two steps (at least one sentence is admitted whatever its
  // length): bounds how much an admission delays the sentences already decoding.
  int max_admit_tokens = 2048;
  // A loop that is decoding admits newcomers once they number a quarter of its active
  // sentences, or once the oldest has waited this many of its steps: every admission costs
  // an encode, which is worth it only for enough sentences at once. An idle loop admits at
  // once. 1 = admit between every two steps.
  int max_admit_delay_steps = 8;
  int max_queue_sentences = 4096;  // waiting sentences; beyond it submit() refuses
};

}  // namespace nmt::server
