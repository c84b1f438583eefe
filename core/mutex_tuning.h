// How absl::Mutex (gRPC's locks) behaves in the Strait executables.
#pragma once

namespace strait {

// Turns off absl::Mutex's deadlock detection. Debian builds abseil without NDEBUG, so every lock
// of every absl::Mutex, which gRPC takes several times per message, records the locks held in a
// process-wide graph (GraphCycles) behind one global lock: 0.4% of a federation's CPU in a profile
// of `strait demo` (docs/notes/wan-two-core-floor.md), for a check meant for debugging. The tests'
// own processes, which do not call this, keep it. Call first thing in main(), before any thread
// starts.
void SkipMutexDeadlockDetection();

}  // namespace strait
