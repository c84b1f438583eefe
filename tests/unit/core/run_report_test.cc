// RunReport: the progress line's format (which the demo, the tests and scripts read), the loss
// history across rollbacks, and a metrics.json write whose every failure names the file.
#include "core/run_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace strait {
namespace {

using ::testing::HasSubstr;

TEST(RunReportTest, ProgressLineFormat) {
  ProgressFigures f;
  f.step = 42;
  f.total = 400;
  f.samples_per_second = 1234.4;
  f.eta_s = 125;
  EXPECT_EQ(FormatProgressLine(f), "step     42/400  1234 samples/s  ETA 2m05s");
  f.loss = 0.123456;
  EXPECT_EQ(FormatProgressLine(f), "step     42/400  loss 0.1235  1234 samples/s  ETA 2m05s");
  f.epoch = 1.5;
  EXPECT_EQ(FormatProgressLine(f),
            "step     42/400  epoch 1.50  loss 0.1235  1234 samples/s  ETA 2m05s");
}

TEST(RunReportTest, PrintsLinesWithTheWindowsRate) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  RunReport report(10, 32, out);
  const auto start = RunReport::Clock::now();
  report.RestartWindow(start);
  report.CountStep();
  report.CountStep();
  // Two steps of 32 samples in 2 s; the ETA of the 8 steps left at that rate.
  report.PrintProgress(2, std::nullopt, 0.5, std::nullopt, start + std::chrono::seconds(2));
  report.CountStep();
  report.PrintProgress(3, std::nullopt, std::nullopt, 61.0, start + std::chrono::seconds(6));
  report.Print("interrupted at step 3: paused");
  std::rewind(out);
  char buffer[512] = {};
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, out);
  std::fclose(out);
  EXPECT_EQ(std::string(buffer, n),
            "step      2/10  loss 0.5000  32 samples/s  ETA 0m08s\n"
            "step      3/10  8 samples/s  ETA 1m01s\n"
            "interrupted at step 3: paused\n");
}

TEST(RunReportTest, ReplayedStepsReplaceTheirLosses) {
  LossHistory h;
  EXPECT_EQ(h.first_step(), -1);
  h.Restart(0);
  for (double loss : {1.0, 0.9, 0.8, 0.7, 0.6}) h.Add(loss);
  h.Restart(2);  // A rollback to the checkpoint of step 2: steps 2.. are trained again.
  h.Add(0.81);
  EXPECT_EQ(h.first_step(), 0);
  EXPECT_EQ(h.losses(), (std::vector<double>{1.0, 0.9, 0.81}));
  h.Restart(3);  // A Pause and a rollback to where the run stands: nothing replaced.
  h.Add(0.71);
  EXPECT_EQ(h.losses(), (std::vector<double>{1.0, 0.9, 0.81, 0.71}));

  LossHistory resumed;  // A site restarted with --resume at step 40.
  resumed.Restart(40);
  resumed.Add(0.3);
  resumed.Restart(30);  // The federation goes back further: the history starts over there.
  resumed.Add(0.4);
  EXPECT_EQ(resumed.first_step(), 30);
  EXPECT_EQ(resumed.losses(), (std::vector<double>{0.4}));

  LossHistory single;  // `strait train` never restarts.
  single.Add(2.0);
  EXPECT_EQ(single.first_step(), 0);
}

TEST(RunReportTest, WritesMetricsJson) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("strait_run_report_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  RunReport report(2, 8);
  report.metrics()["steps"] = 2;
  report.metrics()["loss"] = std::vector<double>{0.5, 0.25};
  ASSERT_TRUE(report.WriteMetrics(dir).ok());
  std::ifstream in(dir + "/metrics.json");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(text, "{\n \"loss\": [\n  0.5,\n  0.25\n ],\n \"steps\": 2\n}\n");
  std::filesystem::remove_all(dir);
}

TEST(RunReportTest, FailedWritesNameTheFile) {
  const absl::Status missing = WriteJsonFile("/nonexistent-dir/metrics.json", {{"steps", 1}});
  EXPECT_EQ(missing.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(missing.message(), HasSubstr("cannot create /nonexistent-dir/metrics.json: "));
  // A full disk shows when the buffered bytes are flushed.
  if (std::filesystem::exists("/dev/full")) {
    const absl::Status full = WriteJsonFile("/dev/full", {{"steps", 1}});
    EXPECT_EQ(full.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(full.message(), HasSubstr("cannot write /dev/full: "));
  }
}

}  // namespace
}  // namespace strait
