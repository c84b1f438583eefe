// Text for a language model (`data.dataset: text`): a UTF-8 file cut into token windows. The last
// `data.validation` fraction of the tokens is the held-out split; each split is cut into
// non-overlapping windows of `context` tokens, sample i being tokens [i*T, (i+1)*T) and its labels
// the next tokens [i*T + 1, (i+1)*T + 1). The seeded sampler shuffles the windows like images, so
// the first stage (inputs) and the last (labels) read the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/job_spec.h"
#include "site/data/dataset.h"
#include "site/data/tokenizer.h"

namespace strait::site {

// Offset of the first byte of `text` that does not belong to well-formed UTF-8 (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF; a character cut short at the end counts as
// bad), or -1.
int64_t FirstInvalidUtf8(absl::string_view text);

// The contents of a UTF-8 text file. An error names the file, `what` it is (e.g. "data.path") and,
// for text that is not UTF-8, the offset of the first bad byte. Thread-safe.
absl::StatusOr<std::string> ReadUtf8File(const std::string& path, absl::string_view what);

// The tokens of a UTF-8 file with `tokenizer: bytes`: one per byte, in [0, 256). Errors as
// ReadUtf8File's. Thread-safe.
absl::StatusOr<std::vector<int32_t>> ReadByteTokens(const std::string& path);

// The tokens of `data.path` under `data.tokenizer`, with the tokenizer (checked against
// gpt.vocab, see LoadTokenizer).
struct TextTokens {
  std::vector<int32_t> ids;
  std::shared_ptr<const Tokenizer> tokenizer;
};

// Tokenizes a text data set's file. A process keeps its last SentencePiece result (keyed by the
// file's contents and the model's fingerprint): a site asks for both splits and their sizes, and
// encoding a few MB takes seconds. Blocks while reading and encoding. Thread-safe.
absl::StatusOr<std::shared_ptr<const TextTokens>> TokenizeTextFile(const DataSpec& data,
                                                                   const GptSpec& gpt);

// The windows of one split of `tokens` (features = targets = context, classes = vocab). An error
// says when the split is shorter than one window plus its next token. bytes_per_token is left 1.
absl::StatusOr<Dataset> MakeTextWindows(const std::vector<int32_t>& tokens, double validation,
                                        const GptSpec& gpt, Split split);

// LoadDataset for `dataset: text`, with bytes_per_token measured on the split's labels.
// Thread-safe.
absl::StatusOr<Dataset> LoadTextDataset(const DataSpec& data, const GptSpec& gpt, Split split);

// The number of windows of a split (bytes: from the file's size; SentencePiece: tokenizes it, see
// TokenizeTextFile). Thread-safe.
absl::StatusOr<int64_t> TextDatasetSize(const DataSpec& data, const GptSpec& gpt, Split split);

}  // namespace strait::site
