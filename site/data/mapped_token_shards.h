// The token shards of a directory (site/data/token_index.h), memory-mapped read-only: the stream of
// tokens that a `format: tokens` data set reads windows from, without reading the files whole. Only
// the pages a read touches come into memory (they are the files' own page cache, MAP_SHARED), and
// a read drops its pages from the mapping again once copied (MADV_DONTNEED; the page cache keeps
// them), so a site's resident memory does not grow with the corpus or with the steps it trains.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "site/data/token_index.h"

namespace strait::site {

// Immutable once opened; Read is thread-safe (reads of read-only mappings).
class MappedTokenShards {
 public:
  // Maps the shards of `index` in `dir` after checking each file against the index: NotFound when
  // one is missing, DataLoss when its size is not its tokens times the dtype's width; each error
  // names the file and the index.
  static absl::StatusOr<std::shared_ptr<const MappedTokenShards>> Open(const std::string& dir,
                                                                       const TokenIndex& index);
  ~MappedTokenShards();
  MappedTokenShards(const MappedTokenShards&) = delete;
  MappedTokenShards& operator=(const MappedTokenShards&) = delete;

  const TokenIndex& index() const { return index_; }

  // Copies tokens [begin, begin + n) of the stream (which must lie in [0, index().tokens)) to
  // out[0, n). DataLoss naming the shard and the token's place when a token is not below
  // index().vocab (a damaged shard; the model's embedding must never see it).
  absl::Status Read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  struct Mapping {
    std::string path;
    const unsigned char* data = nullptr;
    size_t bytes = 0;
    int64_t first = 0;  // The stream offset of its first token.
    int64_t tokens = 0;
  };
  MappedTokenShards(std::string dir, TokenIndex index);
  // Drops the page-table entries around bytes [begin, end) of `m`.
  static void Unmap(const Mapping& m, int64_t begin, int64_t end);

  const std::string dir_;
  const TokenIndex index_;
  std::vector<Mapping> maps_;  // One per shard, in stream order.
};

}  // namespace strait::site
