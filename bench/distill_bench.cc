// `strait bench distill`: knowledge sharing (issue 46), side by side in one run.
//
// The job spec (a student with a `teacher:`, e.g. configs/kjv-gpt-distill.yaml) trains twice in
// this process with `strait train`'s trainer, on the same data and steps: the student alone (the
// teacher removed) and the student taught. Both evaluate on the held-out split every
// training.eval_every steps. Printed: both validation curves, the final losses and their
// difference, the step from which the taught student's loss is at or below the alone student's
// final one, steps/s of each, and the bytes per target the teacher's targets take on the wire
// against fp32 logits.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "core/job_spec.h"
#include "site/backend/backend_factory.h"
#include "site/exchange/teacher_targets_codec.h"
#include "site/pipeline/trainer.h"

namespace strait::bench {
namespace {

struct DistillBenchOptions {
  std::string config;
  int64_t steps = 0;  // 0: the job spec's.
  int threads = 2;
};

struct Curve {
  std::vector<std::pair<int64_t, double>> val;  // (steps done, validation loss).
  double seconds = 0;                           // Training steps only.
  int64_t steps = 0;
};

absl::StatusOr<Curve> Train(const JobSpec& spec, int threads, const char* name) {
  auto backend = site::CreateBackend(DeviceKind::kCpu, {threads, 0, spec.training.precision});
  if (!backend.ok()) return backend.status();
  std::unique_ptr<site::Backend> teacher_backend;
  if (spec.has_teacher) {
    auto made = site::CreateBackend(DeviceKind::kCpu, {threads, 0, spec.training.precision});
    if (!made.ok()) return made.status();
    teacher_backend = *std::move(made);
  }
  auto trainer = site::Trainer::Create(spec, *std::move(backend), std::move(teacher_backend));
  if (!trainer.ok()) return trainer.status();
  site::Trainer& t = **trainer;
  Curve curve;
  curve.steps = t.total_steps();
  while (t.step() < curve.steps) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<site::StepStats> step = t.Step();
    if (!step.ok()) return step.status();
    curve.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (spec.training.EvaluatesAfter(t.step(), curve.steps) || t.step() == curve.steps) {
      absl::StatusOr<site::Evaluation> e = t.Evaluate();
      if (!e.ok()) return e.status();
      curve.val.emplace_back(t.step(), e->loss);
      std::printf("  %s: step %lld, validation loss %.4f nats/token\n", name,
                  static_cast<long long>(t.step()), e->loss);
      std::fflush(stdout);
    }
  }
  return curve;
}

// Bytes per target of the teacher's targets on the wire (one microbatch's frame payload).
double TargetBytes(const JobSpec& spec) {
  const int64_t rows = int64_t{spec.training.MicrobatchSize()} * spec.model.TargetsPerSample();
  return static_cast<double>(site::TeacherTargetsBytes(rows, spec.teacher.top_k,
                                                       spec.teacher.values, spec.model.Classes())) /
         static_cast<double>(rows);
}

int RunDistillBench(const DistillBenchOptions& o) {
  absl::StatusOr<JobSpec> taught = LoadJobSpec(o.config);
  if (!taught.ok() || !taught->has_teacher) {
    std::fprintf(stderr, "strait bench distill: %s\n",
                 taught.ok() ? (o.config + " has no teacher: add a `teacher:` section "
                                           "(docs/distillation.md)")
                                   .c_str()
                             : std::string(taught.status().message()).c_str());
    return 2;
  }
  if (o.steps > 0) {
    taught->training.steps = o.steps;
    taught->training.epochs = 0;
  }
  JobSpec alone = *taught;
  alone.has_teacher = false;
  std::printf("student alone ...\n");
  absl::StatusOr<Curve> a = Train(alone, o.threads, "alone");
  if (!a.ok()) {
    std::fprintf(stderr, "strait bench distill: alone: %s\n", a.status().ToString().c_str());
    return 1;
  }
  std::printf("student taught by %s ...\n", taught->teacher.checkpoint.c_str());
  absl::StatusOr<Curve> b = Train(*taught, o.threads, "taught");
  if (!b.ok()) {
    std::fprintf(stderr, "strait bench distill: taught: %s\n", b.status().ToString().c_str());
    return 1;
  }
  std::printf("\n%8s %14s %14s\n", "step", "alone", "taught");
  for (size_t i = 0; i < a->val.size() && i < b->val.size(); ++i) {
    std::printf("%8lld %14.4f %14.4f\n", static_cast<long long>(a->val[i].first), a->val[i].second,
                b->val[i].second);
  }
  const double alone_final = a->val.back().second, taught_final = b->val.back().second;
  int64_t reached = -1;
  for (const auto& [step, loss] : b->val) {
    if (loss <= alone_final) {
      reached = step;
      break;
    }
  }
  std::printf("\nfinal validation loss: alone %.4f, taught %.4f nats/token (%+.2f%%)\n",
              alone_final, taught_final, 100 * (taught_final / alone_final - 1));
  if (reached > 0) {
    std::printf(
        "the taught student reaches the alone student's final loss at step %lld of %lld "
        "(%.0f%% of its steps)\n",
        static_cast<long long>(reached), static_cast<long long>(a->steps),
        100.0 * reached / a->steps);
  } else {
    std::printf("the taught student does not reach the alone student's final loss\n");
  }
  std::printf("steps/s: alone %.2f, taught %.2f (the teacher's forward in the same process)\n",
              a->steps / a->seconds, b->steps / b->seconds);
  const double logits = 4.0 * taught->model.Classes(), targets = TargetBytes(*taught);
  std::printf(
      "teacher targets: %.1f bytes per target (top %d as %s) against %.0f for fp32 logits: "
      "%.1fx fewer\n",
      targets, taught->teacher.top_k, ToString(taught->teacher.values), logits, logits / targets);
  return 0;
}

}  // namespace

void AddBenchDistillCommand(CLI::App& bench, int* exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "distill",
      "Knowledge sharing: the job's student trained alone and taught by its teacher on the same "
      "data and steps, validation curves side by side, and the teacher's bytes per target");
  auto o = std::make_shared<DistillBenchOptions>();
  cmd->add_option("-c,--config", o->config, "Job spec with a teacher")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", o->steps, "Steps to train each student (default: the job spec's)");
  cmd->add_option("--threads", o->threads, "CPU threads of each model's backend")
      ->capture_default_str();
  cmd->callback([o, exit_code] { *exit_code = RunDistillBench(*o); });
}

}  // namespace strait::bench
