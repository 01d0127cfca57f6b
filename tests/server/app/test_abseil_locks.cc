// skip_abseil_deadlock_detection() (server/app/abseil_locks.h): with Debian's Abseil (built
// without NDEBUG) a lock order that inverts an earlier one aborts the process ("Potential
// Mutex deadlock") unless the detection is off. The case runs in a child process of its own,
// so that the mode and the lock graph start fresh.
#include <absl/synchronization/mutex.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "server/app/abseil_locks.h"

namespace {

// Locks a then b, then b then a: an inversion Abseil's debug mode reports.
void invert_lock_order() {
  absl::Mutex a;
  absl::Mutex b;
  {
    absl::MutexLock la(&a);
    absl::MutexLock lb(&b);
  }
  {
    absl::MutexLock lb(&b);
    absl::MutexLock la(&a);
  }
}

TEST(AbseilLocks, AnInvertedLockOrderPassesWithTheDetectionOff) {
  EXPECT_EXIT(
      {
        nmt::server::skip_abseil_deadlock_detection();
        invert_lock_order();
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
