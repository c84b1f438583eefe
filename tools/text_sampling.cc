#include "tools/text_sampling.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_time.h"
#include "core/status.h"
#include "site/backend/backend_factory.h"
#include "site/data/tokenizer.h"
#include "tools/model_checkpoints.h"

namespace strait::tools {

absl::StatusOr<TextSample> SampleFromCheckpoints(const JobSpec& spec, const std::string& dir,
                                                 const std::string& prompt, int tokens,
                                                 const site::SamplingOptions& sampling,
                                                 int threads) {
  if (!spec.model.IsLanguageModel()) {
    return absl::InvalidArgumentError(absl::StrCat("the job spec trains a ",
                                                   ToString(spec.model.family),
                                                   " model; text comes from a gpt or a llama"));
  }
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<site::Tokenizer> tokenizer,
                          site::LoadTokenizer(spec.data, spec.model.gpt));
  STRAIT_ASSIGN_OR_RETURN(ModelParams params, LoadModelParams(spec, dir));
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<site::Backend> backend,
      site::CreateBackend(DeviceKind::kCpu,
                          {threads == 0 ? UsableCores() : threads, 0, spec.training.precision}));
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<site::TextGenerator> generator,
      site::TextGenerator::Create(spec.model, params.params, std::move(backend)));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int32_t> start,
                          tokenizer->Encode(prompt.empty() ? "\n" : prompt));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, generator->Generate(start, tokens, sampling));
  TextSample sample;
  STRAIT_ASSIGN_OR_RETURN(sample.text, tokenizer->Decode(ids));
  sample.step = params.step;
  sample.files = static_cast<int>(params.sources.size());
  return sample;
}

}  // namespace strait::tools
