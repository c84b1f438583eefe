// `strait bench generate`: the time per generated token of a GPT against the length of the prompt
// before it (issue 46's serving target): one KvDecoder step per token with the prompt cached
// (site/nn/kv_decoder.h, what `strait generate` does within the context) beside a forward of the
// whole window per token; the best of a few rounds. The model is the job spec's at its initial
// parameters: the time of a token does not depend on the weights' values. With --federation, the
// same curve through a serving federation on loopback (a gateway and one `strait-site --serve`
// per site, each decoding its layers of --checkpoint): a token's time is the difference between
// requests of 1 + n and of 1 token after the same prompt, over n (the prompt's pass cancels).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/command.h"
#include "core/job_spec.h"
#include "harness/job_spec_rewrite.h"
#include "harness/local_federation.h"
#include "site/backend/backend_factory.h"
#include "site/nn/kv_decoder.h"
#include "site/nn/stage.h"
#include "site/nn/text_generator.h"
#include "site/rpc/federation_sampling.h"

namespace strait::bench {
namespace {

struct GenerateBenchOptions {
  std::string config;
  bool federation = false;
  std::string checkpoint;  // --federation: the model the sites serve.
  int tokens = 8;          // Generated after each prompt.
  int rounds = 5;          // The best of.
  int threads = 1;
};

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The prompt lengths measured: 16, 32, ... and the longest that leaves room for `tokens`.
std::vector<int> PromptLengths(int context, int tokens) {
  std::vector<int> lengths;
  for (int length = 16; length + tokens <= context; length *= 2) lengths.push_back(length);
  if (lengths.empty() || lengths.back() != context - tokens) lengths.push_back(context - tokens);
  return lengths;
}

int RunFederationBench(const GenerateBenchOptions& o, const JobSpec& spec) {
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "strait bench generate: %s\n", std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  if (spec.serving.clients.empty() || o.checkpoint.empty()) {
    return fail(absl::InvalidArgumentError(
        "--federation needs a job with serving: {clients: [...]} and --checkpoint FILE"));
  }
  absl::StatusOr<harness::RewrittenJobSpec> rewritten = harness::RewriteJobSpec(o.config, {});
  if (!rewritten.ok()) return fail(rewritten.status());
  std::vector<std::string> ids;
  for (const SiteSpec& site : spec.sites) ids.push_back(site.id);
  const std::string client = spec.serving.clients.front();
  ids.push_back(client);
  harness::LocalFederation fed(rewritten->yaml, ids);
  std::string error;
  if (!fed.StartGateway({}, &error)) return fail(absl::InternalError(error));
  const std::string checkpoint = std::filesystem::absolute(o.checkpoint).string();
  for (const SiteSpec& site : spec.sites) {
    fed.StartSite(site.id,
                  {"--serve", "--checkpoint", checkpoint, "--threads", std::to_string(o.threads)});
  }
  const std::string certs = fed.dir().File("certs") + "/";
  const site::FederationClient who{.id = client,
                                   .cert = certs + client + ".pem",
                                   .key = certs + client + ".key",
                                   .ca = certs + "ca.pem",
                                   .gateway = fed.gateway_address()};
  // The served seconds of `tokens` tokens after a prompt of `length`, once the sites serve.
  auto served = [&](int length, int tokens) -> absl::StatusOr<double> {
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<site::FederationSample> sample = site::SampleFromFederation(
          rewritten->spec, who, std::string(length, 'a'), tokens, {.temperature = 0});
      if (sample.ok()) return sample->seconds;
      if (sample.status().code() != absl::StatusCode::kFailedPrecondition || attempt == 600) {
        return sample.status();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
  const int context = spec.model.gpt.context;
  std::printf(
      "%s through %zu serving sites on loopback: ms per generated token (%d after each "
      "prompt, the best of %d rounds)\n",
      spec.name.c_str(), spec.sites.size(), o.tokens, o.rounds);
  std::printf("%8s %14s\n", "prompt", "federation");
  const std::vector<int> lengths = PromptLengths(context, o.tokens + 1);
  // A first request warms the sites and the connection up (threads, allocations), uncounted.
  if (absl::StatusOr<double> warm = served(lengths.front(), 1 + o.tokens); !warm.ok()) {
    return fail(warm.status());
  }
  double first = 0, last = 0;
  for (int length : lengths) {
    double best = 1e9;
    for (int round = 0; round < o.rounds; ++round) {
      absl::StatusOr<double> one = served(length, 1), many = served(length, 1 + o.tokens);
      if (!one.ok() || !many.ok()) return fail(!one.ok() ? one.status() : many.status());
      best = std::min(best, (*many - *one) / o.tokens);
    }
    std::printf("%8d %14.3f\n", length, 1e3 * best);
    if (length == lengths.front()) first = best;
    last = best;
  }
  std::printf("federation: a token after a prompt of %d costs %.2fx one after a prompt of %d\n",
              lengths.back(), last / first, lengths.front());
  return 0;
}

int RunGenerateBench(const GenerateBenchOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok() || !spec->model.IsLanguageModel()) {
    std::fprintf(stderr, "strait bench generate: %s\n",
                 spec.ok() ? "the job's model is not a language model (gpt, llama)"
                           : std::string(spec.status().message()).c_str());
    return 2;
  }
  if (o.federation) return RunFederationBench(o, *spec);
  const ModelSpec& model = spec->model;
  auto backend = site::CreateBackend(DeviceKind::kCpu, {o.threads});
  if (!backend.ok()) return 1;
  auto stage = site::Stage::Create(model, {0, model.NumLayers()}, 1, backend->get());
  if (!stage.ok()) return 1;
  auto initial = (*stage)->InitialParams();
  if (!initial.ok()) return 1;
  const std::vector<float> params = *std::move(initial);
  stage->reset();  // It computes on the backend the generator takes over.
  auto generator = site::TextGenerator::Create(model, params, *std::move(backend));
  auto decoder = site::KvDecoder::Create(model, {0, model.NumLayers()}, params);
  if (!generator.ok() || !decoder.ok()) {
    std::fprintf(stderr, "strait bench generate: %s %s\n", generator.status().ToString().c_str(),
                 decoder.status().ToString().c_str());
    return 1;
  }
  const int context = model.gpt.context;
  std::printf(
      "%s: %d layers, context %d; ms per generated token (%d after each prompt, the best "
      "of %d rounds)\n",
      spec->name.c_str(), model.NumLayers(), context, o.tokens, o.rounds);
  std::printf("%8s %14s %14s\n", "prompt", "kv cache", "whole window");
  double first = 0, last = 0;
  const std::vector<int> lengths = PromptLengths(context, o.tokens);
  for (int length : lengths) {
    double kv = 1e9, window = 1e9;
    for (int round = 0; round < o.rounds; ++round) {
      // The cache holds the prompt; then each token is one Step (what generation does for it).
      (*decoder)->Reset();
      for (int i = 0; i < length; ++i) {
        if (!(*decoder)->Step({static_cast<float>('a')}).ok()) return 1;
      }
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.tokens; ++i) {
        if (!(*decoder)->Step({static_cast<float>('b')}).ok()) return 1;
      }
      kv = std::min(kv, Seconds(start) / o.tokens);
      const std::vector<int32_t> prompt(length, 'a');
      start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.tokens; ++i) {
        if (!(*generator)->NextLogits(prompt).ok()) return 1;
      }
      window = std::min(window, Seconds(start) / o.tokens);
    }
    std::printf("%8d %14.3f %14.3f\n", length, 1e3 * kv, 1e3 * window);
    if (length == lengths.front()) first = kv;
    last = kv;
  }
  std::printf("kv cache: a token after a prompt of %d costs %.2fx one after a prompt of %d\n",
              lengths.back(), last / first, lengths.front());
  return 0;
}

}  // namespace

void AddBenchGenerateCommand(CLI::App& bench, int* exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "generate",
      "Time per generated token of the job's GPT against the prompt's length, with the key/value "
      "cache beside a whole-window forward per token");
  auto o = std::make_shared<GenerateBenchOptions>();
  cmd->add_option("-c,--config", o->config, "Job spec of a gpt")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokens", o->tokens, "Tokens generated after each prompt")
      ->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Rounds per prompt length (the best counts)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads of the window forward's backend")
      ->capture_default_str();
  cmd->add_flag("--federation", o->federation,
                "Through a serving federation on loopback instead (the job needs serving.clients)");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "With --federation: the model the sites serve (a whole model's final.ckpt)")
      ->type_name("FILE");
  cmd->callback([o, exit_code] { *exit_code = RunGenerateBench(*o); });
}

}  // namespace strait::bench
