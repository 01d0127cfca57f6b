#pragma once

namespace nmt::server {

// Turns off Abseil's mutex deadlock detection for this process. Called first thing in the
// main() of each gRPC program (nmt-server, nmt-loadgen), before gRPC starts its threads; the
// mode is read at each lock, so mutexes gRPC made during static initialization follow it.
//
// Why: Debian builds Abseil without NDEBUG, so absl::Mutex runs in its debug mode, where
// every Lock() records the lock order in one process-wide graph behind one spinlock: a lock
// costs ~20x what it does otherwise (97 ns against 5 ns, two threads, the development
// machine), and every lock of every thread takes that one spinlock. gRPC 1.51 locks
// absl mutexes many times a call; nmt-server under 256 clients spent ~17% of its CPU in
// Abseil's locks and that spinlock (bench/history/server.md, server run 39). Our own code locks
// std::mutex, which this does not touch.
void skip_abseil_deadlock_detection();

}  // namespace nmt::server
