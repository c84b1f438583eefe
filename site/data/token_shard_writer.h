// `strait data prepare`: UTF-8 documents to token shards and their index (site/data/token_index.h),
// which `data: {format: tokens, path: DIR}` memory-maps.
//
// Each input file is one document. Files are read in chunks (16 MiB by default), never whole:
// memory stays bounded by a chunk and its tokens whatever the corpus. With a SentencePiece model a
// chunk is encoded up to its last newline (the rest goes with the next chunk; a chunk without a
// newline is encoded whole), which gives the ids of the whole file for models that `strait
// tokenizer train` writes (the tokenizer encodes long texts line-chunked itself); byte tokens are
// the bytes. Shards are fixed cuts of the one stream of tokens (`shard_tokens` each, the last
// shorter): a document may span shards.
//
// Crash safety: DIR/index.json is removed first and written last, and every file is written under
// a temporary name, synced and renamed, so an interrupted run leaves no index that claims shards.
// Shard files of an earlier run that the new index does not name are removed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "site/data/token_index.h"
#include "site/data/tokenizer.h"

namespace strait::site {

inline constexpr int64_t kDefaultShardTokens = int64_t{256} << 20;

struct TokenShardOptions {
  std::vector<std::string> inputs;  // UTF-8 files, one document each, in stream order.
  std::string out;                  // The directory (made if missing).
  int64_t shard_tokens = kDefaultShardTokens;
  // Unset: uint16 when the vocabulary fits (<= 65536 tokens), else uint32.
  std::optional<TokenDtype> dtype;
  size_t chunk_bytes = size_t{16} << 20;
};

// Where a run is; handed to the progress callback after every chunk.
struct TokenShardProgress {
  int64_t bytes_read = 0;
  int64_t bytes_total = 0;  // The inputs' sizes when the run started.
  int64_t tokens = 0;
};

// Writes the shards and index of `o.inputs` under `tokenizer`, calling `progress` (may be empty)
// on the caller's thread. Returns the index written. Errors name the file: a missing input
// (NotFound, before anything is written), text that is not UTF-8 (InvalidArgument with the offset
// of the first bad byte), a dtype too narrow for the vocabulary, I/O failures. Blocks.
absl::StatusOr<TokenIndex> PrepareTokenShards(
    const TokenShardOptions& o, const Tokenizer& tokenizer,
    const std::function<void(const TokenShardProgress&)>& progress);

}  // namespace strait::site
