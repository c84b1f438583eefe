// `strait generate`: samples text from a trained language model's checkpoints.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/job_spec.h"
#include "site/backend/backend_factory.h"
#include "site/nn/text_generator.h"
#include "tools/command.h"
#include "tools/model_checkpoints.h"

namespace strait::tools {
namespace {

struct GenerateOptions {
  std::string config;
  std::string checkpoint;
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
  if (spec->model.family != ModelFamily::kGpt) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
                    "%s trains a %s model; generate samples from language models (family gpt)",
                    o.config, ToString(spec->model.family))),
                2);
  }
  if (spec->data.tokenizer != "bytes") {
    return Fail(absl::UnimplementedError("only 'tokenizer: bytes' is supported by this build"), 2);
  }
  absl::StatusOr<ModelParams> params = LoadModelParams(*spec, o.checkpoint);
  if (!params.ok()) return Fail(params.status(), 1);
  auto backend = site::CreateBackend(DeviceKind::kCpu, {o.threads, 0});
  if (!backend.ok()) return Fail(backend.status(), 1);
  auto generator = site::TextGenerator::Create(spec->model, params->params, *std::move(backend));
  if (!generator.ok()) return Fail(generator.status(), 1);
  std::fprintf(stderr, "strait generate: %s after %lld steps, from %zu checkpoint file(s)\n",
               spec->name.c_str(), static_cast<long long>(params->step), params->sources.size());

  // Byte tokens: the prompt's bytes in, bytes out. An empty prompt starts from a newline.
  std::vector<int32_t> prompt(o.prompt.begin(), o.prompt.end());
  for (int32_t& t : prompt) t &= 0xFF;
  if (prompt.empty()) prompt.push_back('\n');
  const site::SamplingOptions sampling{o.temperature, o.top_k, o.seed};
  absl::StatusOr<std::vector<int32_t>> text = (*generator)->Generate(prompt, o.tokens, sampling);
  if (!text.ok()) return Fail(text.status(), 1);
  std::string out(text->begin(), text->end());
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Sample text from a trained language model (family gpt): the checkpoints of `strait train` "
      "or of a federation's sites, assembled. Prints the prompt and what follows it.");
  cmd->add_option("-c,--config", o->config, "Job spec the model was trained with")
      ->required()
      ->type_name("FILE");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "Folder with final.ckpt (strait train --out), <site>/final.ckpt for every "
                  "site (the demo's out/), or <site>/step-N.ckpt (checkpoint.dir)")
      ->required()
      ->type_name("DIR");
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
