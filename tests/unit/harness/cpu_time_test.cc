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

TEST(CpuTimeTest, ThisProcessCountsTheCpuItSpends) {
  // Spinning spends CPU time, however loaded the machine (the loop ends once it is counted: no
  // timed assertion); one thread spends at most its wall time; sleeping spends none to speak of.
  const double before = ProcessCpuSeconds();
  const auto start = Clock::now();
  double x = 1.0;
  while (ProcessCpuSeconds() - before < 0.2) {
    for (int i = 0; i < 10000; ++i) x = std::sqrt(x + i);
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(x, 0.0);
  EXPECT_LE(ProcessCpuSeconds() - before, wall + 0.02);
  const double slept_from = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(ProcessCpuSeconds() - slept_from, 0.1);
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
