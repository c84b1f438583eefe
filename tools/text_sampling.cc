#include "tools/text_sampling.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/backend_factory.h"
#include "tools/model_checkpoints.h"

namespace strait::tools {

absl::StatusOr<TextSample> SampleFromCheckpoints(const JobSpec& spec, const std::string& dir,
                                                 const std::string& prompt, int tokens,
                                                 const site::SamplingOptions& sampling,
                                                 int threads) {
  if (spec.model.family != ModelFamily::kGpt) {
    return absl::InvalidArgumentError(absl::StrCat("the job spec trains a ",
                                                   ToString(spec.model.family),
                                                   " model; text comes from family gpt"));
  }
  if (spec.data.tokenizer != "bytes") {
    return absl::InvalidArgumentError("only 'tokenizer: bytes' is supported");
  }
  STRAIT_ASSIGN_OR_RETURN(ModelParams params, LoadModelParams(spec, dir));
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<site::Backend> backend,
      site::CreateBackend(DeviceKind::kCpu, {threads, 0, spec.training.precision}));
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<site::TextGenerator> generator,
      site::TextGenerator::Create(spec.model, params.params, std::move(backend)));
  // Byte tokens: the prompt's bytes in, bytes out.
  std::vector<int32_t> start;
  for (unsigned char c : prompt) start.push_back(c);
  if (start.empty()) start.push_back('\n');
  STRAIT_ASSIGN_OR_RETURN(std::vector<int32_t> text, generator->Generate(start, tokens, sampling));
  TextSample sample;
  sample.text.assign(text.begin(), text.end());
  sample.step = params.step;
  sample.files = static_cast<int>(params.sources.size());
  return sample;
}

}  // namespace strait::tools
