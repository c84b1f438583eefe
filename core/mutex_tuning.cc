#include "core/mutex_tuning.h"

#include "absl/synchronization/mutex.h"

namespace strait {

void SkipMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace strait
