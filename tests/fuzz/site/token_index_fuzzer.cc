// A token shards' index.json comes from a disk and a directory someone copied: whatever its bytes,
// parsing it returns an error or an index whose numbers add up (shards holding exactly its tokens,
// each shard's bytes its tokens times the width, documents tiling the stream), never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "site/data/token_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<strait::site::TokenIndex> index =
      strait::site::ParseTokenIndex(json, "index.json");
  if (!index.ok()) return 0;
  const int width = strait::site::TokenWidth(index->dtype);
  int64_t tokens = 0;
  for (const strait::site::TokenShard& s : index->shards) {
    if (s.tokens < 1 || s.bytes != s.tokens * width || s.file.find('/') != std::string::npos) {
      std::abort();
    }
    tokens += s.tokens;
  }
  int64_t next = 0;
  for (const strait::site::TokenDocument& d : index->documents) {
    if (d.offset != next || d.tokens < 0) std::abort();
    next += d.tokens;
  }
  if (tokens != index->tokens || next != index->tokens || index->vocab < 1) std::abort();
  // What it writes parses back to the same index.
  absl::StatusOr<strait::site::TokenIndex> again =
      strait::site::ParseTokenIndex(strait::site::FormatTokenIndex(*index), "again");
  if (!again.ok() || again->tokens != index->tokens ||
      again->documents.size() != index->documents.size()) {
    std::abort();
  }
  return 0;
}
