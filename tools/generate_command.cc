// `strait generate`: samples text from a trained language model's checkpoints.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "core/job_spec.h"
#include "site/rpc/federation_sampling.h"
#include "tools/command.h"
#include "tools/text_sampling.h"

namespace strait::tools {
namespace {

struct GenerateOptions {
  std::string config;
  std::string checkpoint;
  bool federation = false;  // Ask the job's serving federation instead.
  site::FederationClient client;
  std::string prompt;
  int tokens = 200;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 1;
  int threads = 0;
};

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "strait generate: %s\n", std::string(status.message()).c_str());
  return code;
}

int RunGenerate(const GenerateOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok()) return Fail(spec.status(), 2);
  if (absl::Status s = RefuseProjectingLinks(*spec, "strait generate --checkpoint");
      !o.federation && !s.ok()) {
    return Fail(s, 2);
  }
  if (o.federation == !o.checkpoint.empty()) {
    return Fail(absl::InvalidArgumentError(
                    "give either --checkpoint DIR (the weights here) or --federation (ask the "
                    "job's serving federation)"),
                2);
  }
  if (o.federation) {
    absl::StatusOr<site::FederationSample> served = site::SampleFromFederation(
        *spec, o.client, o.prompt, o.tokens, {o.temperature, o.top_k, o.seed});
    if (!served.ok()) {
      const absl::StatusCode code = served.status().code();
      return Fail(served.status(), code == absl::StatusCode::kInvalidArgument ? 2 : 1);
    }
    const size_t sampled = served->tokens.size() - served->prompt_tokens;
    std::fprintf(stderr, "strait generate: %s served %zu tokens in %.3f s (%.1f ms a token)\n",
                 spec->name.c_str(), sampled, served->seconds,
                 1000 * served->seconds / std::max<size_t>(sampled, 1));
    std::printf("%s\n", served->text.c_str());
    return 0;
  }
  absl::StatusOr<TextSample> sample = SampleFromCheckpoints(
      *spec, o.checkpoint, o.prompt, o.tokens, {o.temperature, o.top_k, o.seed}, o.threads);
  if (!sample.ok()) {
    const bool bad_input = sample.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail(sample.status(), bad_input ? 2 : 1);
  }
  std::fprintf(stderr, "strait generate: %s after %lld steps, from %d checkpoint file(s)\n",
               spec->name.c_str(), static_cast<long long>(sample->step), sample->files);
  std::printf("%s\n", sample->text.c_str());
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Sample text from a trained language model (gpt or llama): the checkpoints of `strait train` "
      "or of a federation's sites, assembled. The job spec's data.tokenizer (bytes or a "
      "SentencePiece model) encodes the prompt and decodes the text. Prints the prompt and what "
      "follows it.");
  cmd->add_option("-c,--config", o->config, "Job spec the model was trained with")
      ->required()
      ->type_name("FILE");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "Folder with final.ckpt (strait train --out), <site>/final.ckpt for every "
                  "site (the demo's out/), or <site>/step-N.ckpt (checkpoint.dir)")
      ->type_name("DIR");
  cmd->add_flag("--federation", o->federation,
                "Ask the job's serving federation (strait-site --serve on every site) instead: "
                "this process is one of its serving.clients, and no site's weights leave it");
  cmd->add_option("--client", o->client.id,
                  "With --federation: which of serving.clients "
                  "(default: the first)");
  cmd->add_option("--cert", o->client.cert, "With --federation: the client's certificate (PEM)");
  cmd->add_option("--key", o->client.key, "With --federation: its private key (PEM)");
  cmd->add_option("--gateway", o->client.gateway, "With --federation: host:port of the gateway")
      ->type_name("HOST:PORT");
  cmd->add_option("--prompt", o->prompt, "Text to continue (default: a new line)");
  cmd->add_option("--tokens", o->tokens, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", o->temperature, "Softmax temperature; 0 = most likely token")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", o->top_k, "Sample among the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "Seed of the sampling (same seed, same text)");
  cmd->add_option("--threads", o->threads, "CPU threads (default: the cores it may run on)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([=] { *exit_code = RunGenerate(*o); });
}

}  // namespace strait::tools
