// Text for a language model (`data.dataset: text`): a UTF-8 file cut into token windows. The last
// `data.validation` fraction of the tokens is the held-out split; each split is cut into
// non-overlapping windows of `context` tokens, sample i being tokens [i*T, (i+1)*T) and its labels
// the next tokens [i*T + 1, (i+1)*T + 1). The seeded sampler shuffles the windows like images, so
// the first stage (inputs) and the last (labels) read the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/data/dataset.h"

namespace strait::site {

// The tokens of a UTF-8 file with `tokenizer: bytes`: one per byte, in [0, 256). An error names
// the file and, for text that is not UTF-8, the offset of the first bad byte. Thread-safe.
absl::StatusOr<std::vector<int32_t>> ReadByteTokens(const std::string& path);

// The windows of one split of `tokens` (features = targets = context, classes = vocab). An error
// says when the split is shorter than one window plus its next token.
absl::StatusOr<Dataset> MakeTextWindows(const std::vector<int32_t>& tokens, double validation,
                                        const GptSpec& gpt, Split split);

// LoadDataset for `dataset: text`. Thread-safe.
absl::StatusOr<Dataset> LoadTextDataset(const DataSpec& data, const GptSpec& gpt, Split split);

// The number of windows of a split without tokenizing the file (bytes: its size). Thread-safe.
absl::StatusOr<int64_t> TextDatasetSize(const DataSpec& data, const GptSpec& gpt, Split split);

}  // namespace strait::site
