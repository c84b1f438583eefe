// `strait bench engine`: the training step's achieved GFLOP/s beside the GEMM library's GFLOP/s on
// exactly the matrix products that step performs, measured side by side in one run.
//
// A recording backend wraps the real one for one step and logs every Gemm / GemmBatched call
// (shapes, transposes, batch); the ceiling is the replay of those calls alone on the same backend
// (the CPU backend's pooled OpenBLAS sgemm, or cuBLAS on CUDA) and, on the CPU, as plain
// cblas_sgemm calls with OpenBLAS's own threading. FLOPs are those of the recorded products, so
// each ratio is the share of the ceiling that the whole step achieves. A large square product on
// the same backend (training.precision's: bf16 on tensor cores) measures the device's own rate;
// the step's share of it is the model FLOP utilisation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/command.h"
#include "bench/recording_backend.h"
#include "core/cpu_time.h"
#include "core/job_spec.h"
#include "site/backend/backend_factory.h"
#include "site/backend/counter_rng.h"
#include "site/pipeline/stage_executor.h"

namespace strait::bench {
namespace {

struct EngineBenchOptions {
  std::string config;
  int batch = 128;
  int microbatches = 0;  // 0: the job spec's
  std::string device = "cpu";
  int threads = 0;
  int steps = 10;  // per round
  int rounds = 5;
  int square = 0;  // Side of the square product that measures the device's rate; 0: by device.
  std::string attention = "default";
  std::string gemm = "heuristic";  // cuBLASLt's algorithm per shape: heuristic or timed.
  double peak_tflops = 0;  // The device's dense peak in the spec's precision; 0: by device name.
};

// Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) of the data-centre GPUs a user brings,
// by a part of the device's name: NVIDIA's datasheets. 0 when the name is not known.
double KnownBf16Peak(const std::string& device) {
  struct Peak {
    const char* name;
    double tflops;
  };
  constexpr Peak kPeaks[] = {{"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.4},
                             {"H200", 989.4},      {"GH200", 989.4},    {"A100", 312.0}};
  for (const Peak& p : kPeaks) {
    if (device.find(p.name) != std::string::npos) return p.tflops;
  }
  return 0.0;
}

// llm.c's count of a language model's training FLOPs per token: 6 N (every parameter's forward
// and backward products) + 6 L C T (attention's scores and weighted sum, forward and backward),
// N parameters, L blocks of width C, context T.
double FlopsPerToken(const ModelSpec& model, int64_t params) {
  if (!model.IsLanguageModel()) return 0.0;
  const GptSpec& g = model.gpt;
  return 6.0 * static_cast<double>(params) + 6.0 * g.depth * g.dim * g.context;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "strait bench engine: %s\n", std::string(s.message()).c_str());
  return 1;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One training step of the whole model on random data: M x (forward, loss, backward), update.
absl::Status TrainStep(site::StageExecutor& stage, int64_t step, int microbatches, int n,
                       const std::vector<float>& inputs, const std::vector<int32_t>& labels) {
  stage.ZeroGrad();
  for (int m = 0; m < microbatches; ++m) {
    const float* x = inputs.data() + static_cast<int64_t>(m) * n * stage.input_features();
    if (absl::Status s = stage.Forward(step, m, n, x, nullptr); !s.ok()) return s;
    const int64_t targets = labels.size() / microbatches;  // Per microbatch.
    absl::StatusOr<site::LossResult> loss = stage.Loss(
        m, labels.data() + m * targets, 1.0f / static_cast<float>(targets * microbatches));
    if (!loss.ok()) return loss.status();
    if (absl::Status s = stage.Backward(m, nullptr, nullptr, m == microbatches - 1); !s.ok()) {
      return s;
    }
  }
  return stage.OptimizerStep(step + 1, 1.0f);
}

// GFLOP/s of the best of `reps` square products of side n on `backend` (synchronised), its
// operands and result in the backend's activation type, as the step's products have them.
absl::StatusOr<double> SquareProductGflops(site::Backend& backend, int n, int reps) {
  const size_t floats = static_cast<size_t>(n) * n;
  std::vector<float> host(floats);
  for (size_t i = 0; i < floats; ++i) host[i] = 2 * site::CounterUniform(9, i) - 1;
  const site::DType act = backend.activation_dtype();
  absl::StatusOr<site::DeviceBuffer> staging = site::DeviceBuffer::Create(&backend, 4 * floats);
  if (!staging.ok()) return staging.status();
  backend.CopyToDevice(staging->data(), host.data(), 4 * floats);
  std::vector<site::DeviceBuffer> m;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<site::DeviceBuffer> b =
        site::DeviceBuffer::Create(&backend, site::SizeOf(act) * floats);
    if (!b.ok()) return b.status();
    backend.Convert(floats, staging->f32(), b->typed(act));
    m.push_back(*std::move(b));
  }
  double best = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // The first is a warm-up.
    const auto start = std::chrono::steady_clock::now();
    backend.Gemm(false, false, n, n, n, 1.0f, m[0].typed(act), n, m[1].typed(act), n, 0.0f,
                 m[2].typed(act), n);
    if (absl::Status s = backend.Sync(); !s.ok()) return s;
    if (r > 0) best = std::min(best, Seconds(start));
  }
  return 2.0 * n * n * n / best * 1e-9;
}

int RunEngineBench(const EngineBenchOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok()) return Fail(spec.status());
  const int microbatches = o.microbatches > 0 ? o.microbatches : spec->training.microbatches;
  if (o.batch % microbatches != 0) {
    return Fail(absl::InvalidArgumentError("--batch must be a multiple of the microbatches"));
  }
  const int n = o.batch / microbatches;
  const int threads = o.threads > 0 ? o.threads : UsableCores();
  const site::AttentionKernel attention = o.attention == "fused" ? site::AttentionKernel::kFused
                                          : o.attention == "batched"
                                              ? site::AttentionKernel::kBatched
                                              : site::AttentionKernel::kDefault;
  auto inner = site::CreateBackend(o.device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu,
                                   {.threads = threads,
                                    .precision = spec->training.precision,
                                    .attention = attention,
                                    .timed_gemm = o.gemm == "timed"});
  if (!inner.ok()) return Fail(inner.status());
  // The stage's one worker runs on a recording wrapper of the backend (which the stage owns).
  RecordingBackend* backend = nullptr;
  site::StageWorkers worker;
  worker.make_backend = [&](int) -> absl::StatusOr<std::unique_ptr<site::Backend>> {
    auto recording = std::make_unique<RecordingBackend>(inner->get());
    backend = recording.get();
    return recording;
  };
  auto stage = site::StageExecutor::Create(spec->model, {0, spec->model.NumLayers()},
                                           spec->training.optimizer, n, {}, worker);
  if (!stage.ok()) return Fail(stage.status());

  // Random inputs (token ids for a language model) and labels.
  const bool tokens = spec->model.IsLanguageModel();
  const int classes = spec->model.Classes();
  std::vector<float> inputs(static_cast<size_t>(o.batch) * (*stage)->input_features());
  std::vector<int32_t> labels(static_cast<size_t>(o.batch) * spec->model.TargetsPerSample());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] =
        tokens ? static_cast<float>(i * 7919 % classes) : 2 * site::CounterUniform(1, i) - 1;
  }
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % classes);

  // Warm up (allocations, BLAS buffers), record one step's products, then time.
  for (int64_t s = 0; s < 2; ++s) {
    if (absl::Status st = TrainStep(**stage, s, microbatches, n, inputs, labels); !st.ok())
      return Fail(st);
  }
  backend->StartRecording();
  if (absl::Status st = TrainStep(**stage, 2, microbatches, n, inputs, labels); !st.ok())
    return Fail(st);
  const std::vector<GemmCall> calls = backend->StopRecording();
  double flops = 0;
  for (const GemmCall& c : calls) flops += c.Flops();

  absl::StatusOr<GemmReplay> replay = GemmReplay::Create(calls, inner->get());
  if (!replay.ok()) return Fail(replay.status());
  // Rounds alternate the three measurements; the best round of each counts (a shared machine's
  // other load only ever adds time).
  double step_seconds = 1e30, gemm_seconds = 1e30, plain_seconds = 1e30;
  // Plain OpenBLAS is an f32 reference: it has no counterpart of bf16 operands.
  const bool plain = o.device == "cpu" && (*inner)->activation_dtype() == site::DType::kF32;
  int64_t step = 3;
  for (int round = 0; round < o.rounds; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < o.steps; ++s, ++step) {
      if (absl::Status st = TrainStep(**stage, step, microbatches, n, inputs, labels); !st.ok())
        return Fail(st);
    }
    step_seconds = std::min(step_seconds, Seconds(start) / o.steps);
    start = std::chrono::steady_clock::now();
    for (int s = 0; s < o.steps; ++s) {
      if (absl::Status st = replay->Run(); !st.ok()) return Fail(st);
    }
    gemm_seconds = std::min(gemm_seconds, Seconds(start) / o.steps);
    if (plain) {
      start = std::chrono::steady_clock::now();
      for (int s = 0; s < o.steps; ++s) replay->RunPlainOpenBlas(threads);
      plain_seconds = std::min(plain_seconds, Seconds(start) / o.steps);
    }
  }
  const double step_gflops = flops / step_seconds * 1e-9, gemm_gflops = flops / gemm_seconds * 1e-9;
  std::printf("engine bench: %s (%s, %d layers, %lld parameters) on %s\n", spec->name.c_str(),
              ToString(spec->model.family), spec->model.NumLayers(),
              static_cast<long long>((*stage)->param_count()), (*inner)->Name().c_str());
  const int head_dim = spec->model.IsLanguageModel() ? spec->model.gpt.head_dim()
                       : spec->model.family == ModelFamily::kVit
                           ? spec->model.vit.dim / spec->model.vit.heads
                           : 0;
  if (head_dim > 0) {
    std::printf("attention: %s\n", (*inner)->FusedAttention(head_dim)
                                       ? "fused kernel (no [T, T] matrix)"
                                       : "batched products through a [T, T] matrix per head");
  }
  std::printf(
      "training step, batch %d = %d x %d: %.2f ms, %.0f samples/s, %.3f GFLOP in %zu "
      "matrix products\n",
      o.batch, microbatches, n, 1e3 * step_seconds, o.batch / step_seconds, flops * 1e-9,
      calls.size());
  if (tokens) {
    std::printf("tokens/s of a whole training step: %.0f (%d tokens per window)\n",
                o.batch * spec->model.TargetsPerSample() / step_seconds,
                spec->model.TargetsPerSample());
  }
  std::printf("%-34s %10s %10s\n", "", "ms/step", "GFLOP/s");
  std::printf("%-34s %10.2f %10.1f\n", "training step (all ops)", 1e3 * step_seconds, step_gflops);
  std::printf("%-34s %10.2f %10.1f\n", "same products, backend Gemm alone", 1e3 * gemm_seconds,
              gemm_gflops);
  if (plain) {
    const double plain_gflops = flops / plain_seconds * 1e-9;
    std::printf("%-34s %10.2f %10.1f\n", "same products, plain OpenBLAS", 1e3 * plain_seconds,
                plain_gflops);
    std::printf("step / plain OpenBLAS sgemm: %.1f%%\n", 100 * step_gflops / plain_gflops);
  }
  std::printf("step / backend Gemm alone: %.1f%%\n", 100 * step_gflops / gemm_gflops);
  const int side = o.square > 0 ? o.square : (o.device == "cuda" ? 8192 : 1024);
  absl::StatusOr<double> peak = SquareProductGflops(**inner, side, 5);
  if (!peak.ok()) return Fail(peak.status());
  std::printf(
      "%-34s %10s %10.1f\n",
      absl::StrCat("square product ", side, "^3, ", ToString(spec->training.precision)).c_str(), "",
      *peak);
  std::printf("step's products / square product: %.1f%%\n", 100 * step_gflops / *peak);

  // Model FLOP utilisation as llm.c counts it, against the device's datasheet peak and against
  // the product rate measured above.
  const double per_token = FlopsPerToken(spec->model, (*stage)->param_count());
  double mfu = 0.0;
  if (per_token > 0.0) {
    const double tokens_per_s = o.batch * spec->model.TargetsPerSample() / step_seconds;
    const double model_tflops = tokens_per_s * per_token * 1e-12;
    std::printf(
        "model FLOPs: 6N + 6LCT = %.3g per token (N %lld, L %d, C %d, T %d): %.1f TFLOP/s\n",
        per_token, static_cast<long long>((*stage)->param_count()), spec->model.gpt.depth,
        spec->model.gpt.dim, spec->model.gpt.context, model_tflops);
    std::printf("MFU against the measured square product (%.3g TFLOP/s): %.1f%%\n", *peak * 1e-3,
                100 * model_tflops / (*peak * 1e-3));
    const double datasheet = o.peak_tflops > 0 ? o.peak_tflops : KnownBf16Peak((*inner)->Name());
    if (datasheet > 0 && o.device == "cuda") {
      mfu = 100 * model_tflops / datasheet;
      std::printf("MFU against the dense bf16 peak (%.1f TFLOP/s, %s): %.1f%%\n", datasheet,
                  o.peak_tflops > 0 ? "--peak-tflops" : "the datasheet's", mfu);
    }
    std::printf("RESULT strait_engine tokens_per_s=%.1f ms_per_step=%.3f mfu=%.2f\n", tokens_per_s,
                1e3 * step_seconds, mfu);
  }

  // Where a step's time goes: one more step with every op timed on its own (waiting for the
  // device around each op adds their launch latency, so the shares, not the sum, are the figure).
  backend->StartProfiling();
  if (absl::Status st = TrainStep(**stage, step, microbatches, n, inputs, labels); !st.ok())
    return Fail(st);
  const std::map<std::string, double> families = backend->StopProfiling();
  double total = 0.0;
  for (const auto& [name, seconds] : families) total += seconds;
  std::printf("share of a step by kernel family (ops timed one by one, %.2f ms in all):\n",
              1e3 * total);
  for (const char* name : kKernelFamilies) {
    const auto it = families.find(name);
    const double seconds = it == families.end() ? 0.0 : it->second;
    std::printf("  %-14s %8.2f ms %5.1f%%\n", name, 1e3 * seconds,
                total > 0 ? 100 * seconds / total : 0.0);
  }
  return 0;
}

}  // namespace

void AddBenchEngineCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<EngineBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "engine",
      "Training-step GFLOP/s of a job spec's model beside the GEMM library's GFLOP/s on "
      "the same matrix products, measured in one run");
  cmd->add_option("-c,--config", o->config, "Job spec whose model is measured")
      ->required()
      ->type_name("FILE");
  cmd->add_option("--batch", o->batch, "Global batch")->check(CLI::PositiveNumber);
  cmd->add_option("--square", o->square,
                  "Side of the square product that measures the device's own rate, in the job "
                  "spec's training.precision (default 8192 on cuda, 1024 on cpu)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--microbatches", o->microbatches, "Microbatches per step (default: the spec's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", o->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--attention", o->attention,
                  "Self-attention: fused (one kernel, no [T, T] matrix), batched (products through "
                  "a [T, T] matrix) or default (the backend's choice)")
      ->check(CLI::IsMember({"default", "fused", "batched"}));
  cmd->add_option("--gemm", o->gemm,
                  "cuda: cuBLASLt's algorithm for each product shape, the heuristic's first choice "
                  "or the fastest of its candidates timed on the first step (timed)")
      ->check(CLI::IsMember({"heuristic", "timed"}));
  cmd->add_option("--threads", o->threads, "CPU threads (default: the cores it may run on)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--peak-tflops", o->peak_tflops,
                  "The device's dense bf16 peak for MFU (default: by the GPU's name, e.g. 989.4 "
                  "for an H100 SXM)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", o->steps, "Timed steps per round")->check(CLI::PositiveNumber);
  cmd->add_option("--rounds", o->rounds, "Rounds (the best round counts)")
      ->check(CLI::PositiveNumber);
  cmd->callback([=] { *exit_code = RunEngineBench(*o); });
}

}  // namespace strait::bench
