// `strait bench collective`: data parallelism on CPU workers and ranks (site/collective), measured
// side by side in one run: the training-step time of one MLP stage with 1 worker, with W workers
// of the same threads each, with 1 worker of W times the threads (the same cores used by plain
// intra-op threading), and as W ranks of one worker (a site of several machines: Gloo over
// loopback TCP between them) with the share of the cross-rank all-reduce that the backward pass
// hid; then the all-reduce's GB/s over that stage's gradient buckets, in process and with Gloo
// across W ranks, beside memcpy of the same bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/command.h"
#include "core/job_spec.h"
#include "core/status.h"
#include "site/backend/counter_rng.h"
#include "site/collective/all_reducer.h"
#include "site/collective/gloo_group.h"
#include "site/collective/worker_pool.h"
#include "site/pipeline/local_rank_peers.h"
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
  int ranks = 1;  // > 1: a site of that many ranks of `workers` each (Gloo between them).
  std::unique_ptr<StageExecutor> group;
  std::unique_ptr<site::LocalRankSite> site;  // Ranks > 1; group is null then.
  double seconds = 1e30;                      // best round, per step
  StageExecutor& stage() { return group ? *group : site->leader(); }
};

// Seconds per all-reduce of `workers` buffers of the group's gradient-arena size, per-layer
// buckets, and per memcpy of one such buffer; the best of `rounds` rounds.
struct AllReduceTiming {
  int64_t floats = 0;
  double reduce_seconds = 1e30, gloo_seconds = 1e30, memcpy_seconds = 1e30;
};

// Runs `round` on W threads `rounds` x `steps` times; the best round's seconds per step.
absl::StatusOr<double> BestRound(const CollectiveBenchOptions& o, site::WorkerPool& pool,
                                 const std::function<absl::Status(int)>& round) {
  STRAIT_RETURN_IF_ERROR(pool.Run(round));  // warm-up
  double best = 1e30;
  for (int r = 0; r < o.rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < o.steps; ++s) STRAIT_RETURN_IF_ERROR(pool.Run(round));
    best = std::min(best, Seconds(start) / o.steps);
  }
  return best;
}

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
  site::WorkerPool pool(o.workers);
  // In process: one shared-memory reduction of the W buffers.
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<site::AllReducer> reducer,
                          site::CreateCpuAllReducer(pointers, buckets));
  STRAIT_ASSIGN_OR_RETURN(t.reduce_seconds, BestRound(o, pool, [&](int w) {
                            for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
                              reducer->Ready(w, b);
                            }
                            return reducer->Finish(w);
                          }));
  // Across W ranks, one buffer each: Gloo over loopback TCP, bucket by bucket.
  STRAIT_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<site::GlooGroup>> groups,
                          site::GlooGroup::ConnectInProcess(o.workers));
  std::vector<std::unique_ptr<site::AllReducer>> ranks;
  for (int w = 0; w < o.workers; ++w) {
    STRAIT_ASSIGN_OR_RETURN(ranks.emplace_back(), site::CreateCrossRankCpuReducer(
                                                      {pointers[w]}, buckets, groups[w].get()));
  }
  STRAIT_ASSIGN_OR_RETURN(t.gloo_seconds, BestRound(o, pool, [&](int w) {
                            for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
                              ranks[w]->Ready(0, b);
                            }
                            return ranks[w]->Finish(0);
                          }));
  std::vector<float> copy(t.floats);
  for (int r = 0; r < o.rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
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
  configs.push_back({.workers = 1, .threads = o.threads_per_worker});
  configs.push_back({.workers = o.workers, .threads = o.threads_per_worker});
  configs.push_back({.workers = 1, .threads = o.workers * o.threads_per_worker});
  configs.push_back({.workers = 1, .threads = o.threads_per_worker, .ranks = o.workers});
  for (Config& c : configs) {
    if (c.ranks > 1) {
      auto site = site::LocalRankSite::Create(model, {0, o.layers}, optimizer, o.batch, {},
                                              {.threads = c.threads, .ranks = c.ranks});
      if (!site.ok()) return Fail(site.status());
      c.site = *std::move(site);
    } else {
      auto g = StageExecutor::Create(model, {0, o.layers}, optimizer, o.batch, {},
                                     {.count = c.workers, .threads = c.threads});
      if (!g.ok()) return Fail(g.status());
      c.group = *std::move(g);
    }
    for (int64_t s = 0; s < 2; ++s) {  // warm-up: allocations, BLAS buffers
      if (absl::Status st = TrainStep(c.stage(), s, o.microbatches, o.batch, inputs, labels);
          !st.ok())
        return Fail(st);
    }
  }
  const site::AllReducer::Times before = configs.back().site->leader_reducers[0]->times();
  // Rounds alternate the configurations; the best round of each counts (a shared machine's other
  // load only ever adds time).
  for (int r = 0; r < o.rounds; ++r) {
    for (Config& c : configs) {
      auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < o.steps; ++s) {
        if (absl::Status st = TrainStep(c.stage(), 2 + int64_t{r} * o.steps + s, o.microbatches,
                                        o.batch, inputs, labels);
            !st.ok())
          return Fail(st);
      }
      c.seconds = std::min(c.seconds, Seconds(start) / o.steps);
    }
  }
  const site::AllReducer::Times after = configs.back().site->leader_reducers[0]->times();
  absl::StatusOr<AllReduceTiming> ar = TimeAllReduce(o);
  if (!ar.ok()) return Fail(ar.status());

  std::printf(
      "collective bench: MLP stage of %d Linear layers %d wide (%lld parameters), "
      "batch %d = %d x %d, AdamW\n",
      o.layers, o.width, static_cast<long long>(configs[0].stage().param_count()), global,
      o.microbatches, o.batch);
  std::printf("%-40s %10s %10s %9s\n", "", "ms/step", "samples/s", "speed-up");
  for (const Config& c : configs) {
    const std::string label =
        c.ranks > 1 ? absl::StrCat(c.ranks, " ranks (Gloo, loopback) x ", c.threads,
                                   c.threads == 1 ? " thread" : " threads")
                    : absl::StrCat(c.workers, c.workers == 1 ? " worker" : " workers", " x ",
                                   c.threads, c.threads == 1 ? " thread" : " threads");
    std::printf("%-40s %10.2f %10.0f %8.2fx\n", label.c_str(), 1e3 * c.seconds, global / c.seconds,
                configs[0].seconds / c.seconds);
  }
  const double busy = after.busy_s - before.busy_s, exposed = after.exposed_s - before.exposed_s;
  std::printf(
      "%d ranks: the cross-rank all-reduce took %.2f ms per step, of which %.2f ms waited on "
      "after the backward pass: %.0f%% hidden behind it\n",
      o.workers, 1e3 * busy / (o.rounds * o.steps), 1e3 * exposed / (o.rounds * o.steps),
      busy > 0 ? 100.0 * (1.0 - exposed / busy) : 0.0);
  const double bytes = sizeof(float) * static_cast<double>(ar->floats);
  auto line = [&](const char* what, double seconds) {
    std::printf("%-52s %8.3f ms %7.2f GB/s %6.2fx memcpy\n", what, 1e3 * seconds,
                bytes / seconds * 1e-9, ar->memcpy_seconds / seconds);
  };
  std::printf("all-reduce of %d x %.1f MB in %d per-layer buckets (buffer bytes / time):\n",
              o.workers, bytes * 1e-6, o.layers);
  line(absl::StrCat("  in process, ", o.workers, " threads (shared memory)").c_str(),
       ar->reduce_seconds);
  line(absl::StrCat("  across ", o.workers, " ranks (Gloo, loopback TCP)").c_str(),
       ar->gloo_seconds);
  line("  memcpy of one buffer", ar->memcpy_seconds);
  return 0;
}

}  // namespace

void AddBenchCollectiveCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<CollectiveBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "collective",
      "Step time of an MLP stage on 1 vs W CPU workers and W ranks (Gloo), the share of the "
      "cross-rank all-reduce hidden behind the backward pass, and the all-reduce's GB/s in "
      "process and with Gloo beside memcpy, measured in one run");
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
