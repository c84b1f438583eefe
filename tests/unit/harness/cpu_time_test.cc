// CPU time of this process (core/cpu_time.h) and of a child (Process::CpuSeconds), which
// `strait bench e2e` adds up to tell how busy the federation kept the cores it may use
// (UsableCores).
#include "core/cpu_time.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <thread>

#include "harness/subprocess.h"

namespace strait::harness {
namespace {

using Clock = std::chrono::steady_clock;

// Spins for `wall` of wall time; returns something the compiler cannot drop.
double Spin(std::chrono::milliseconds wall) {
  double x = 1.0;
  const auto end = Clock::now() + wall;
  while (Clock::now() < end) {
    for (int i = 0; i < 10000; ++i) x = std::sqrt(x + i);
  }
  return x;
}

TEST(CpuTimeTest, ThisProcessCountsTheCpuItSpends) {
  const double before = ProcessCpuSeconds();
  EXPECT_GT(Spin(std::chrono::milliseconds(300)), 0.0);
  const double spent = ProcessCpuSeconds() - before;
  // A loaded machine gives the spinning thread less than its wall time, never more (one thread).
  EXPECT_GT(spent, 0.05);
  EXPECT_LT(spent, 1.0);
}

TEST(CpuTimeTest, UsableCoresFollowTheAffinityMask) {
  const int all = UsableCores();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(UsableCores(), 1);  // As under `taskset -c N`.
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(UsableCores(), all);
}

TEST(CpuTimeTest, ABusyChildCountsItsCpuAndASleepingOneDoesNot) {
  TempDir dir;
  Process busy({"/bin/sh", "-c", "while :; do :; done"}, dir.File("busy.log"));
  Process idle({"/bin/sleep", "30"}, dir.File("idle.log"));
  double busy_s = 0;
  for (int i = 0; i < 100 && busy_s < 0.2; ++i) {  // Up to 10 s on a loaded machine.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    busy_s = busy.CpuSeconds();
  }
  EXPECT_GE(busy_s, 0.2);
  EXPECT_LT(idle.CpuSeconds(), 0.1);
  busy.Kill(SIGKILL);
  busy.Wait(std::chrono::seconds(5));
  EXPECT_EQ(busy.CpuSeconds(), 0.0) << "a process that Wait() saw exit has no CPU time to read";
}

}  // namespace
}  // namespace strait::harness
