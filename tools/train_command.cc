// `strait train`: trains the whole model of a job spec in one process (the reference run).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cpu_time.h"
#include "core/job_spec.h"
#include "core/logging.h"
#include "core/run_report.h"
#include "site/backend/backend_factory.h"
#include "site/pipeline/trainer.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

struct TrainOptions {
  std::string config;
  int64_t steps = 0;  // 0: the job spec's steps or epochs
  std::string device = "cpu";
  int threads = 0;  // 0: the cores this process may run on
  std::string out = "train-out";
  int log_every = 50;
};

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "strait train: %s\n", std::string(status.message()).c_str());
  return code;
}

int RunTrain(const TrainOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok()) return Fail(spec.status(), 2);
  if (absl::Status s = RefuseProjectingLinks(*spec, "strait train"); !s.ok()) return Fail(s, 2);
  if (o.steps > 0) {
    spec->training.steps = o.steps;
    spec->training.epochs = 0;
  }
  if (spec->Replicas() > 1) {
    const int replicas = spec->Replicas();
    spec = OnePipelineOf(*spec);
    if (!spec.ok()) return Fail(spec.status(), 2);
    std::printf("strait train: the %d replicas' one-pipeline equivalent: global batch %d\n",
                replicas, spec->training.global_batch);
  }
  const int threads = o.threads > 0 ? o.threads : UsableCores();
  const DeviceKind device = o.device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu;
  auto backend = site::CreateBackend(device, {threads, 0, spec->training.precision});
  if (!backend.ok()) return Fail(backend.status(), 1);
  const std::string backend_name = (*backend)->Name();
  std::unique_ptr<site::Backend> teacher_backend;
  if (spec->has_teacher) {
    auto made = site::CreateBackend(device, {threads, 0, spec->training.precision});
    if (!made.ok()) return Fail(made.status(), 1);
    teacher_backend = *std::move(made);
    std::printf("strait train: taught by %s (%d layers; top %d as %s, alpha %g, temperature %g)\n",
                spec->teacher.checkpoint.c_str(), spec->teacher.model.NumLayers(),
                spec->teacher.top_k, ToString(spec->teacher.values), spec->training.distill.alpha,
                spec->training.distill.temperature);
  }
  auto trainer = site::Trainer::Create(*spec, *std::move(backend), std::move(teacher_backend));
  if (!trainer.ok()) return Fail(trainer.status(), 1);
  site::Trainer& t = **trainer;
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return Fail(absl::InternalError("cannot create --out " + o.out + ": " + ec.message()), 1);

  const TrainingSpec& ts = spec->training;
  const int64_t total = t.total_steps(), per_epoch = t.steps_per_epoch();
  std::printf("strait train: %s, %s model, %d layers, %lld parameters on %s\n", spec->name.c_str(),
              ToString(spec->model.family), spec->model.NumLayers(),
              static_cast<long long>(t.stage().param_count()), backend_name.c_str());
  std::printf("%lld steps (%lld per epoch), global batch %d = %d x %d, %s lr %g%s\n",
              static_cast<long long>(total), static_cast<long long>(per_epoch), ts.global_batch,
              ts.microbatches, ts.MicrobatchSize(), ToString(ts.optimizer.kind), ts.optimizer.lr,
              ts.optimizer.decay == LrDecay::kCosine
                  ? absl::StrCat(", cosine decay over ",
                                 WithDecayHorizon(ts.optimizer, total).decay_steps, " steps")
                        .c_str()
                  : "");
  std::fflush(stdout);

  RunReport report(total, ts.global_batch);
  report.metrics() = {{"config", o.config},
                      {"device", backend_name},
                      {"threads", threads},
                      {"global_batch", ts.global_batch},
                      {"microbatches", ts.microbatches}};
  nlohmann::json epochs = nlohmann::json::array();
  // training.eval_every's, then the final one: the steps a federation's last site evaluates at.
  std::vector<site::StepEvaluation> evaluations;
  double train_seconds = 0, epoch_loss = 0;
  int64_t epoch_steps = 0;
  while (t.step() < total) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<site::StepStats> stats = t.Step();
    if (!stats.ok()) return Fail(stats.status(), 1);
    const auto end = std::chrono::steady_clock::now();
    train_seconds += std::chrono::duration<double>(end - start).count();
    report.losses().Add(stats->loss);
    report.CountStep();
    epoch_loss += stats->loss;
    ++epoch_steps;
    const bool epoch_end = t.step() % per_epoch == 0 && t.step() < total;
    const bool periodic = ts.EvaluatesAfter(t.step(), total);
    if (t.step() % o.log_every == 0 || t.step() == total || epoch_end || periodic) {
      report.PrintProgress(t.step(), static_cast<double>(t.step()) / per_epoch, stats->loss,
                           std::nullopt, end);
    }
    if (!epoch_end && !periodic) continue;
    absl::StatusOr<site::Evaluation> evaluation = t.Evaluate();
    if (!evaluation.ok()) return Fail(evaluation.status(), 1);
    if (periodic) {
      evaluations.push_back({t.step(), *evaluation});
      report.Print(site::DescribeEvaluationAt(spec->model, evaluations.back()));
    }
    if (epoch_end) {
      nlohmann::json epoch = {{"epoch", t.step() / per_epoch},
                              {"mean_loss", epoch_loss / epoch_steps}};
      site::AddEvaluationJson(spec->model, *evaluation, epoch);
      epochs.push_back(epoch);
      report.Print(absl::StrFormat("epoch %d: mean loss %.4f, %s", t.step() / per_epoch,
                                   epoch_loss / epoch_steps,
                                   site::DescribeEvaluation(spec->model, *evaluation)));
      epoch_loss = 0;
      epoch_steps = 0;
    }
    report.RestartWindow(std::chrono::steady_clock::now());  // The evaluation is no training.
  }
  absl::StatusOr<site::Evaluation> evaluation = t.Evaluate();
  if (!evaluation.ok()) return Fail(evaluation.status(), 1);
  evaluations.push_back({t.step(), *evaluation});
  if (epoch_steps > 0) {
    nlohmann::json epoch = {{"epoch", static_cast<double>(t.step()) / per_epoch},
                            {"mean_loss", epoch_loss / epoch_steps}};
    site::AddEvaluationJson(spec->model, *evaluation, epoch);
    epochs.push_back(epoch);
  }
  const double samples_per_second = total * ts.global_batch / std::max(train_seconds, 1e-9);
  report.Print(absl::StrFormat("%s after %d steps; %.0f samples/s (%s training)",
                               site::DescribeEvaluation(spec->model, *evaluation), total,
                               samples_per_second, FormatDuration(train_seconds)));

  const std::string checkpoint = o.out + "/final.ckpt";
  if (absl::Status s = t.SaveCheckpoint(checkpoint); !s.ok()) return Fail(s, 1);
  nlohmann::json& metrics = report.metrics();
  metrics["steps"] = total;
  metrics["loss"] = report.losses().losses();
  metrics["epochs"] = epochs;
  metrics["evaluations"] = site::EvaluationsJson(spec->model, evaluations);
  site::AddEvaluationJson(spec->model, *evaluation, metrics);
  metrics["samples_per_second"] = samples_per_second;
  metrics["train_seconds"] = train_seconds;
  if (absl::Status s = report.WriteMetrics(o.out); !s.ok()) return Fail(s, 1);
  std::printf("wrote %s/metrics.json and %s\n", o.out.c_str(), checkpoint.c_str());
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* train = app.add_subcommand(
      "train",
      "Train the whole model of a job spec in one process (the reference for fidelity "
      "and speed): same microbatching and data order as the federation. Prints progress "
      "and the held-out figures (every training.eval_every steps and at the end); writes "
      "metrics.json and final.ckpt to --out.");
  train->add_option("-c,--config", o->config, "Job spec (federation YAML)")
      ->required()
      ->type_name("FILE");
  train->add_option("--steps", o->steps, "Train this many global steps instead of the spec's")
      ->check(CLI::PositiveNumber);
  train->add_option("--device", o->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  train
      ->add_option("--threads", o->threads,
                   "CPU threads (default: the cores it may run on); fixed = deterministic")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--out", o->out, "Output directory")->type_name("DIR");
  train->add_option("--log-every", o->log_every, "Steps between progress lines")
      ->check(CLI::PositiveNumber);
  train->callback([=] { *exit_code = RunTrain(*o); });
}

}  // namespace strait::tools
