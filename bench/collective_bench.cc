// `strait bench collective`: local data parallelism on CPU workers (site/collective), measured
// side by side in one run: the training-step time of one MLP stage with 1 worker, with W workers
// of the same threads each, and with 1 worker of W times the threads (the same cores used by
// plain intra-op threading); then the CPU all-reduce's GB/s over that stage's gradient arena
// beside memcpy of the same bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/command.h"
#include "core/job_spec.h"
#include "core/status.h"
#include "site/backend/counter_rng.h"
#include "site/collective/all_reducer.h"
#include "site/collective/worker_pool.h"
#include "site/pipeline/stage_executor.h"

namespace strait::bench {
namespace {

using site::StageExecutor;

struct CollectiveBenchOptions {
  int width = 1024;
  int layers = 3;
  int batch = 256;  // microbatch rows
  int microbatches = 2;
  int workers = 2;
  int threads_per_worker = 1;
  int steps = 5;  // per round
  int rounds = 3;
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "strait bench collective: %s\n", std::string(s.message()).c_str());
  return 1;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `layers` Linear layers of width x width (ReLU between them), `width` classes.
ModelSpec Model(const CollectiveBenchOptions& o) {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = o.width;
  m.mlp.hidden.assign(o.layers - 1, o.width);
  m.mlp.classes = o.width;
  m.mlp.activation = Activation::kRelu;
  return m;
}

// One step as the site daemon runs it: M x (forward, loss, backward), the last backward with the
// all-reduce, then the optimizer on every replica.
absl::Status TrainStep(StageExecutor& g, int64_t step, int microbatches, int n,
                       const std::vector<float>& inputs, const std::vector<int32_t>& labels) {
  g.ZeroGrad();
  for (int m = 0; m < microbatches; ++m) {
    STRAIT_RETURN_IF_ERROR(
        g.Forward(step, m, n, inputs.data() + int64_t{m} * n * g.input_features(), nullptr));
    STRAIT_RETURN_IF_ERROR(
        g.Loss(m, labels.data() + int64_t{m} * n, 1.0f / (n * microbatches)).status());
    STRAIT_RETURN_IF_ERROR(g.Backward(m, nullptr, nullptr, m == microbatches - 1));
  }
  return g.OptimizerStep(step + 1, 1.0f);
}

struct Config {
  int workers, threads;
  std::unique_ptr<StageExecutor> group;
  double seconds = 1e30;  // best round, per step
};

// Seconds per all-reduce of `workers` buffers of the group's gradient-arena size, per-layer
// buckets, and per memcpy of one such buffer; the best of `rounds` rounds.
struct AllReduceTiming {
  int64_t floats = 0;
  double reduce_seconds = 1e30, memcpy_seconds = 1e30;
};

absl::StatusOr<AllReduceTiming> TimeAllReduce(const CollectiveBenchOptions& o) {
  AllReduceTiming t;
  std::vector<site::Bucket> buckets;
  for (int k = 0; k < o.layers; ++k) {
    const int64_t numel = int64_t{o.width} * o.width + o.width;
    buckets.push_back({t.floats, numel});
    t.floats += numel;
  }
  std::vector<std::vector<float>> buffers(o.workers, std::vector<float>(t.floats));
  std::vector<float*> pointers;
  for (int w = 0; w < o.workers; ++w) {
    for (int64_t i = 0; i < t.floats; ++i) buffers[w][i] = site::CounterUniform(w, i) * 1e-3f;
    pointers.push_back(buffers[w].data());
  }
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<site::AllReducer> reducer,
                          site::CreateCpuAllReducer(pointers, buckets));
  site::WorkerPool pool(o.workers);
  auto round = [&](int w) {
    for (int b = 0; b < static_cast<int>(buckets.size()); ++b) reducer->Ready(w, b);
    return reducer->Finish(w);
  };
  std::vector<float> copy(t.floats);
  STRAIT_RETURN_IF_ERROR(pool.Run(round));  // warm-up
  for (int r = 0; r < o.rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < o.steps; ++s) STRAIT_RETURN_IF_ERROR(pool.Run(round));
    t.reduce_seconds = std::min(t.reduce_seconds, Seconds(start) / o.steps);
    start = std::chrono::steady_clock::now();
    for (int s = 0; s < o.steps; ++s) {
      std::memcpy(copy.data(), buffers[s % o.workers].data(), sizeof(float) * t.floats);
    }
    t.memcpy_seconds = std::min(t.memcpy_seconds, Seconds(start) / o.steps);
  }
  return t;
}

int RunCollectiveBench(const CollectiveBenchOptions& o) {
  const ModelSpec model = Model(o);
  OptimizerSpec optimizer;  // AdamW
  const int global = o.batch * o.microbatches;
  std::vector<float> inputs(int64_t{global} * o.width);
  std::vector<int32_t> labels(global);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = 2 * site::CounterUniform(1, i) - 1;
  for (int i = 0; i < global; ++i) labels[i] = i % o.width;

  std::vector<Config> configs;
  configs.push_back({1, o.threads_per_worker, nullptr});
  configs.push_back({o.workers, o.threads_per_worker, nullptr});
  configs.push_back({1, o.workers * o.threads_per_worker, nullptr});
  for (Config& c : configs) {
    auto g = StageExecutor::Create(model, {0, o.layers}, optimizer, o.batch, {},
                                   {.count = c.workers, .threads = c.threads});
    if (!g.ok()) return Fail(g.status());
    c.group = *std::move(g);
    for (int64_t s = 0; s < 2; ++s) {  // warm-up: allocations, BLAS buffers
      if (absl::Status st = TrainStep(*c.group, s, o.microbatches, o.batch, inputs, labels);
          !st.ok())
        return Fail(st);
    }
  }
  // Rounds alternate the configurations; the best round of each counts (a shared machine's other
  // load only ever adds time).
  for (int r = 0; r < o.rounds; ++r) {
    for (Config& c : configs) {
      auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < o.steps; ++s) {
        if (absl::Status st = TrainStep(*c.group, 2 + int64_t{r} * o.steps + s, o.microbatches,
                                        o.batch, inputs, labels);
            !st.ok())
          return Fail(st);
      }
      c.seconds = std::min(c.seconds, Seconds(start) / o.steps);
    }
  }
  absl::StatusOr<AllReduceTiming> ar = TimeAllReduce(o);
  if (!ar.ok()) return Fail(ar.status());

  std::printf(
      "collective bench: MLP stage of %d Linear layers %d wide (%lld parameters), "
      "batch %d = %d x %d, AdamW\n",
      o.layers, o.width, static_cast<long long>(configs[0].group->param_count()), global,
      o.microbatches, o.batch);
  std::printf("%-40s %10s %10s %9s\n", "", "ms/step", "samples/s", "speed-up");
  for (const Config& c : configs) {
    const std::string label =
        absl::StrCat(c.workers, c.workers == 1 ? " worker" : " workers", " x ", c.threads,
                     c.threads == 1 ? " thread" : " threads");
    std::printf("%-40s %10.2f %10.0f %8.2fx\n", label.c_str(), 1e3 * c.seconds, global / c.seconds,
                configs[0].seconds / c.seconds);
  }
  const double bytes = sizeof(float) * static_cast<double>(ar->floats);
  std::printf(
      "all-reduce of %d x %.1f MB (%d per-layer buckets, %d threads): %.3f ms, %.2f GB/s "
      "(buffer bytes / time); memcpy of one buffer: %.3f ms, %.2f GB/s\n",
      o.workers, bytes * 1e-6, o.layers, o.workers, 1e3 * ar->reduce_seconds,
      bytes / ar->reduce_seconds * 1e-9, 1e3 * ar->memcpy_seconds,
      bytes / ar->memcpy_seconds * 1e-9);
  return 0;
}

}  // namespace

void AddBenchCollectiveCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<CollectiveBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "collective",
      "Step time of an MLP stage on 1 vs W CPU workers (local data parallelism) and the CPU "
      "all-reduce's GB/s beside memcpy, measured in one run");
  cmd->add_option("--width", o->width, "Width of every layer")->check(CLI::PositiveNumber);
  cmd->add_option("--layers", o->layers, "Linear layers in the stage")->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o->batch, "Microbatch rows")->check(CLI::PositiveNumber);
  cmd->add_option("--microbatches", o->microbatches, "Microbatches per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--workers", o->workers, "Workers W compared with 1")->check(CLI::Range(2, 64));
  cmd->add_option("--threads-per-worker", o->threads_per_worker, "CPU threads of each worker")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o->steps, "Timed steps per round")->check(CLI::PositiveNumber);
  cmd->add_option("--rounds", o->rounds, "Rounds (the best round counts)")
      ->check(CLI::PositiveNumber);
  cmd->callback([=] { *exit_code = RunCollectiveBench(*o); });
}

}  // namespace strait::bench
