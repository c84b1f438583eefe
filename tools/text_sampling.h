// Text from a trained language model's checkpoints, for `strait generate` and the demo's summary.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/nn/text_generator.h"

namespace strait::tools {

struct TextSample {
  std::string text;  // The prompt and what the model wrote after it.
  int64_t step = 0;  // Steps the model was trained.
  int files = 0;     // Checkpoint files assembled.
};

// Loads the model of `spec` from `dir` (LoadModelParams) and its tokenizer (data.tokenizer,
// checked against model.vocab) and samples `tokens` tokens after `prompt` (a new line when empty)
// on the CPU with `threads` threads (0: every core it may use).
absl::StatusOr<TextSample> SampleFromCheckpoints(const JobSpec& spec, const std::string& dir,
                                                 const std::string& prompt, int tokens,
                                                 const site::SamplingOptions& sampling,
                                                 int threads);

}  // namespace strait::tools
