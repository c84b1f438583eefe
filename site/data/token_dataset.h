// `data: {dataset: text, format: tokens, path: DIR}`: a language model's data set read from token
// shards that `strait data prepare` wrote (site/data/token_index.h), memory-mapped.
//
// The held-out split is whole documents at the end of the stream: the last document, and before it
// as many more as bring the held-out tokens closest to `data.validation` of all tokens (a corpus of
// one document is refused). Each split is the concatenation of its documents' tokens, cut into
// non-overlapping windows as text_corpus.h cuts a text's (a window may cross from one document into
// the next, as in a text file of several). Bytes per token: the split's documents' UTF-8 bytes over
// their tokens (exactly 1 with byte tokens).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/data/dataset.h"
#include "site/data/token_index.h"

namespace strait::site {

// One split's part of the stream.
struct TokenSplit {
  int64_t begin = 0, end = 0;                   // Tokens [begin, end).
  size_t first_document = 0, end_document = 0;  // Documents [first, end).
  int64_t bytes = 0;                            // Their UTF-8 bytes.
};

// The documents and tokens of `split`. InvalidArgument naming `index_path` for an index of one
// document.
absl::StatusOr<TokenSplit> SplitTokenDocuments(const TokenIndex& index, double validation,
                                               Split split, const std::string& index_path);

// Reads DIR/index.json and checks it against the job: the tokenizer (`data.tokenizer`, loaded and
// checked against gpt.vocab) must have the fingerprint the index names, and the index's vocabulary
// must be gpt.vocab; errors name DIR/index.json and both values. Blocks on reads. Thread-safe.
absl::StatusOr<TokenIndex> ReadCheckedTokenIndex(const DataSpec& data, const GptSpec& gpt);

// LoadDataset for `format: tokens`: the split's windows over the mapped shards (Dataset::windows;
// features = targets = context, classes = vocab). Reads the index only; the shards are checked
// against it and mapped, never read whole. Thread-safe.
absl::StatusOr<Dataset> LoadTokenDataset(const DataSpec& data, const GptSpec& gpt, Split split);

// The number of windows of a split, from the index alone (the shards are neither opened nor
// mapped). Thread-safe.
absl::StatusOr<int64_t> TokenDatasetSize(const DataSpec& data, const GptSpec& gpt, Split split);

}  // namespace strait::site
