// `strait export`: a trained model in Hugging Face's formats (tools/model_export.h).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "core/job_spec.h"
#include "tools/command.h"
#include "tools/model_checkpoints.h"
#include "tools/model_export.h"

namespace strait::tools {
namespace {

struct ExportOptions {
  std::string config, checkpoint, out;
  std::string dtype = "f32";
};

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "strait export: %s\n", message.c_str());
  return code;
}

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(file);
}

int RunExport(const ExportOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), 2);
  if (absl::Status s = RefuseProjectingLinks(*spec, "strait export"); !s.ok()) {
    return Fail(std::string(s.message()), 2);
  }
  absl::StatusOr<ModelParams> params = LoadModelParams(*spec, o.checkpoint);
  if (!params.ok()) return Fail(std::string(params.status().message()), 2);
  absl::StatusOr<ExportedModel> exported =
      ExportModel(spec->model, params->params,
                  o.dtype == "bf16" ? site::SafetensorsDtype::kBF16 : site::SafetensorsDtype::kF32);
  if (!exported.ok()) {
    const bool unsupported = exported.status().code() == absl::StatusCode::kUnimplemented;
    return Fail(std::string(exported.status().message()), unsupported ? 2 : 1);
  }
  std::error_code error;
  std::filesystem::create_directories(o.out, error);
  if (error) return Fail("cannot create " + o.out + ": " + error.message(), 1);
  if (!WriteFile(o.out + "/model.safetensors", exported->safetensors) ||
      !WriteFile(o.out + "/config.json", exported->config_json)) {
    return Fail("cannot write in " + o.out, 1);
  }
  std::printf("wrote %s/model.safetensors (%zu bytes, %s) and config.json: %s after %lld steps\n",
              o.out.c_str(), exported->safetensors.size(), o.dtype.c_str(), spec->name.c_str(),
              static_cast<long long>(params->step));
  return 0;
}

}  // namespace

void AddExportCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a trained model as model.safetensors and config.json with Hugging Face's names and "
      "layout (gpt: GPT-2's), for transformers and the tools that read them");
  cmd->add_option("-c,--config", o->config, "Job spec the model was trained with")
      ->required()
      ->type_name("FILE");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "Folder with final.ckpt, <site>/final.ckpt for every site, or <site>/step-N.ckpt")
      ->required()
      ->type_name("DIR");
  cmd->add_option("--out", o->out, "Folder to write model.safetensors and config.json in")
      ->required()
      ->type_name("DIR");
  cmd->add_option("--dtype", o->dtype, "f32 (exact) or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->callback([=] { *exit_code = RunExport(*o); });
}

}  // namespace strait::tools
