#include "harness/wan/emulator_thread.h"

#include <time.h>

namespace strait::harness {

EmulatorThread::EmulatorThread()
    : work_(io_.get_executor()), thread_([this] { io_.run(); }), handle_(thread_.native_handle()) {}

EmulatorThread::~EmulatorThread() {
  work_.reset();  // run() returns once no handler is pending.
  thread_.join();
}

double EmulatorThread::CpuSeconds() const {
  clockid_t clock;
  timespec t{};
  if (pthread_getcpuclockid(handle_, &clock) != 0 || clock_gettime(clock, &t) != 0) {
    return 0;
  }
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace strait::harness
