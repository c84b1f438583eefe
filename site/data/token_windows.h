// One split of a `format: tokens` data set as samples: window i of `context` tokens and, as its
// labels, the next token of each (text_corpus.h's windows: non-overlapping cuts of the split's
// tokens, sample i being tokens [begin + i*T, begin + (i+1)*T) and its labels one token later).
// Dataset holds one in place of in-memory vectors; GatherSamples reads through it.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "site/data/mapped_token_shards.h"

namespace strait::site {

// Immutable; Read is thread-safe.
class TokenWindows {
 public:
  // `windows` windows of `context` tokens from stream offset `begin`: tokens [begin, begin +
  // windows * context + 1) must lie in the shards.
  TokenWindows(std::shared_ptr<const MappedTokenShards> shards, int64_t begin, int64_t windows,
               int context);

  int64_t size() const { return windows_; }
  int context() const { return context_; }

  // Window `window` (in [0, size())): its tokens as floats in inputs[0, context) and their next
  // tokens in labels[0, context); a null one is skipped. Errors: a window out of range, a damaged
  // shard (MappedTokenShards::Read).
  absl::Status Read(int64_t window, float* inputs, int32_t* labels) const;

 private:
  const std::shared_ptr<const MappedTokenShards> shards_;
  const int64_t begin_;
  const int64_t windows_;
  const int context_;
};

}  // namespace strait::site
