#include "server/app/abseil_locks.h"

#include <absl/synchronization/mutex.h>

namespace nmt::server {

void skip_abseil_deadlock_detection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace nmt::server
