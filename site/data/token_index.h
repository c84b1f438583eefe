// The index of a directory of token shards (`strait data prepare`, `data: {format: tokens}`):
// DIR/index.json says which tokenizer made the tokens, how they are stored and where each input
// document lies in the one stream of tokens that the shards cut into pieces.
//
//   {"format": "strait-token-shards", "version": 1, "dtype": "uint16" | "uint32", "vocab": V,
//    "tokenizer": FINGERPRINT (Tokenizer::fingerprint), "tokens": N,
//    "shards": [{"file": "shard-00000.bin", "tokens": n, "bytes": n * width}, ...],
//    "documents": [{"offset": o, "tokens": n, "bytes": utf8_bytes}, ...]}
//
// Shard k holds tokens [sum of the earlier shards' tokens, + its own) of the stream as raw
// little-endian integers of `dtype`; documents tile [0, N) in order (a document may span shards).
// The index is untrusted input: ParseTokenIndex checks every length, offset and sum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strait::site {

inline constexpr char kTokenIndexFile[] = "index.json";
inline constexpr int kTokenIndexVersion = 1;

enum class TokenDtype { kUint16, kUint32 };

const char* ToString(TokenDtype dtype);
inline int TokenWidth(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? 2 : 4; }

struct TokenShard {
  std::string file;  // A plain file name inside the directory (no '/').
  int64_t tokens = 0;
  int64_t bytes = 0;  // tokens * TokenWidth(dtype).
};

struct TokenDocument {
  int64_t offset = 0;  // Its first token's offset in the stream.
  int64_t tokens = 0;
  int64_t bytes = 0;  // Its size in UTF-8 bytes (bits per byte of a split).
};

struct TokenIndex {
  TokenDtype dtype = TokenDtype::kUint16;
  int vocab = 0;
  std::string tokenizer;  // The tokenizer's fingerprint.
  int64_t tokens = 0;
  std::vector<TokenShard> shards;
  std::vector<TokenDocument> documents;
};

// The index as JSON (what DIR/index.json holds).
std::string FormatTokenIndex(const TokenIndex& index);

// Parses and checks an index; `path` only names it in errors. DataLoss for JSON that is not an
// index of this version or whose numbers do not add up (shards' tokens vs "tokens", a shard's
// bytes vs its tokens, documents that do not tile the stream), each naming the field. Never reads
// out of bounds whatever the bytes. Thread-safe.
absl::StatusOr<TokenIndex> ParseTokenIndex(absl::string_view json, const std::string& path);

// Reads and parses DIR/index.json. NotFound naming the file (and `strait data prepare`) when it is
// missing. Blocks on the read. Thread-safe.
absl::StatusOr<TokenIndex> ReadTokenIndex(const std::string& dir);

}  // namespace strait::site
