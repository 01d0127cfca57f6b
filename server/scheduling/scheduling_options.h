#pragma once
// The `batching:` section of the config: the capacity of each decode loop and the queue in
// front of them (server/scheduling/scheduler.h).
#include "model/decoding/decode_loop.h"

namespace nmt::server {

struct SchedulingOptions {
  // 512 slots and 2048 rows (beam 4): one loop then holds as many sentences as 64 clients of 8
  // sentences a request keep in flight, and steps them as offline batch 512 does (fewer slots
  // served that load below the offline rate: bench/history/server.md). Slots and rows are
  // logical capacity: the decode state's memory follows the tokens in flight on both engines
  // (docs/data-flow.md), so a large bound costs tables, not memory.
  int max_active_sentences = 512;  // sentence slots of each decode loop
  int max_active_rows = 2048;      // KV-cache rows of each loop (a sentence holds beam rows)
  // Source tokens encoded between two steps (at least one sentence is admitted whatever its
  // length): bounds how much an admission delays the sentences already decoding.
  int max_admit_tokens = 2048;
  // A loop that is decoding admits newcomers once they number a quarter of its active
  // sentences, or once the oldest has waited this many of its steps: every admission costs
  // an encode, which is worth it only for enough sentences at once. An idle loop admits at
  // once. 1 = admit between every two steps.
  int max_admit_delay_steps = 8;
  // Several loops of one model on one GPU: while the model's sentences (active and queued)
  // number at most this, one loop decodes them all and the others stay idle (a decoding loop
  // that holds fewer sentences than another leaves newcomers to it, so loops that came to
  // share them drain back to one); beyond it the loops take even shares. The GPU runs the loops' steps one after another (they share its
  // stream), so two half-full loops cost two steps where one full loop costs one; a second
  // loop pays only once its host-side bookkeeping would otherwise leave the GPU idle.
  // 0 = even shares always (the CPU's loops: each has its own cores).
  // A loop's max_active_sentences (512; 256 before server run 32): one full loop rather than
  // two half-full ones. 256 against 64 on H200 (server run 27): 128 clients 23.1k sentences/s
  // against 15.1k (two loops of 64 cost two steps), 256 clients 25.0-28.6k against 24.7-25.2k,
  // 64 clients and one client the same. Server run 12's 64 predates the host's cheaper beam
  // bookkeeping, which made one full loop's steps shorter.
  int loop_fill_sentences = 512;
  int max_queue_sentences = 4096;  // waiting sentences; beyond it submit() refuses
  // The most of max_queue_sentences one tenant (API key, peer address, x-tenant) may keep
  // waiting, times its weight (server/scheduling/fair_queue.h): a quarter, so that one client
  // that floods the queue leaves three quarters of it to the others. 1 = no per-tenant bound.
  double tenant_queue_share = 0.25;
  // GPU: a loop holding at least this many cache rows keeps two steps in flight, each
  // following the one before (DecodeLoop::set_follow_rows; 0 = never).
  int follow_rows = DecodeLoop::kDefaultFollowRows;
};

}  // namespace nmt::server
