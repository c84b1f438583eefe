// The I/O thread link emulators run on. Each LinkEmulator runs on one; several may share one, as
// `strait bench e2e` and `strait demo` do with a federation's links: one wake-up then serves
// whichever links have bytes to read or due, and the emulators add one thread to the machine's
// scheduler, not one per site (on a machine of few cores, waking threads costs more than moving the
// bytes; docs/notes/wan-link-emulator.md, "One thread for a federation's links").
//
//   auto thread = std::make_shared<EmulatorThread>();
//   auto a = LinkEmulator::Start("127.0.0.1:0", gateway, profile, kDialTimeout, thread);
//   auto b = LinkEmulator::Start("127.0.0.1:0", gateway, profile, kDialTimeout, thread);
#pragma once

#include <pthread.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>

namespace strait::harness {

class EmulatorThread {
 public:
  // Starts the thread; it runs until destroyed.
  EmulatorThread();
  // Lets the handlers still pending (those of emulators already destroyed) finish, then joins the
  // thread. Every emulator holds its thread, so this runs after the last of them is gone.
  ~EmulatorThread();

  EmulatorThread(const EmulatorThread&) = delete;
  EmulatorThread& operator=(const EmulatorThread&) = delete;

  boost::asio::io_context& io() { return io_; }

  // User plus system CPU seconds the thread has used so far: what emulating its links costs,
  // including the kernel's work on the forwarded bytes.
  double CpuSeconds() const;

 private:
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  pthread_t handle_;  // thread_'s, for CpuSeconds (std::thread::native_handle is not const)
};

}  // namespace strait::harness
