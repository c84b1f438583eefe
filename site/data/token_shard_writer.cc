#include "site/data/token_shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "site/data/text_corpus.h"

namespace strait::site {
namespace {

namespace fs = std::filesystem;

absl::Status IoError(const std::string& path, absl::string_view what) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const unsigned char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return IoError(path, "write failed (is the disk full?)");
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Writes `bytes` to `path` under a temporary name, synced, then renamed over it.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(tmp, "cannot create");
  absl::Status s =
      WriteAll(fd, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = IoError(tmp, "fsync failed");
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = IoError(path, "rename failed");
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

// The stream of tokens, cut into shard files of `shard_tokens` tokens, little-endian.
class ShardSink {
 public:
  ShardSink(std::string dir, TokenDtype dtype, int64_t shard_tokens)
      : dir_(std::move(dir)), width_(TokenWidth(dtype)), shard_tokens_(shard_tokens) {}
  ~ShardSink() {
    if (fd_ >= 0) {  // Abandoned: the partial shard goes.
      ::close(fd_);
      ::unlink(TmpPath().c_str());
    }
  }

  int64_t tokens() const { return total_; }

  // Appends ids[0, n) (each in [0, 2^(8 width))).
  template <typename Id>
  absl::Status Append(const Id* ids, int64_t n) {
    while (n > 0) {
      if (fd_ < 0) STRAIT_RETURN_IF_ERROR(StartShard());
      const int64_t take = std::min({n, shard_tokens_ - in_shard_, kBufferTokens});
      const size_t at = buffer_.size();
      buffer_.resize(at + static_cast<size_t>(take) * width_);
      unsigned char* p = buffer_.data() + at;
      for (int64_t i = 0; i < take; ++i) {
        const auto v = static_cast<uint32_t>(ids[i]);
        for (int b = 0; b < width_; ++b) *p++ = static_cast<unsigned char>(v >> (8 * b));
      }
      ids += take;
      n -= take;
      in_shard_ += take;
      total_ += take;
      if (buffer_.size() >= kBufferBytes) STRAIT_RETURN_IF_ERROR(Flush());
      if (in_shard_ == shard_tokens_) STRAIT_RETURN_IF_ERROR(EndShard());
    }
    return absl::OkStatus();
  }

  // Closes the last shard; the shards written, in order.
  absl::StatusOr<std::vector<TokenShard>> Finish() {
    if (fd_ >= 0) STRAIT_RETURN_IF_ERROR(EndShard());
    return shards_;
  }

 private:
  static constexpr int64_t kBufferTokens = int64_t{1} << 20;
  static constexpr size_t kBufferBytes = size_t{4} << 20;

  std::string Name() const { return absl::StrFormat("shard-%05d.bin", shards_.size()); }
  std::string TmpPath() const { return (fs::path(dir_) / (Name() + ".tmp")).string(); }

  absl::Status StartShard() {
    fd_ = ::open(TmpPath().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError(TmpPath(), "cannot create");
    in_shard_ = 0;
    return absl::OkStatus();
  }
  absl::Status Flush() {
    STRAIT_RETURN_IF_ERROR(WriteAll(fd_, buffer_.data(), buffer_.size(), TmpPath()));
    buffer_.clear();
    return absl::OkStatus();
  }
  absl::Status EndShard() {
    STRAIT_RETURN_IF_ERROR(Flush());
    const std::string tmp = TmpPath(), path = (fs::path(dir_) / Name()).string();
    if (::fsync(fd_) != 0) return IoError(tmp, "fsync failed");
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0) return IoError(path, "rename failed");
    shards_.push_back({.file = Name(), .tokens = in_shard_, .bytes = in_shard_ * width_});
    return absl::OkStatus();
  }

  const std::string dir_;
  const int width_;
  const int64_t shard_tokens_;
  int fd_ = -1;
  int64_t in_shard_ = 0, total_ = 0;
  std::vector<unsigned char> buffer_;
  std::vector<TokenShard> shards_;
};

// Reads `path` chunk by chunk, checks it is UTF-8 and appends its tokens to `sink`.
class DocumentEncoder {
 public:
  DocumentEncoder(const TokenShardOptions& o, const Tokenizer& tokenizer, ShardSink& sink,
                  const std::function<void(const TokenShardProgress&)>& progress)
      : o_(o),
        tokenizer_(tokenizer),
        bytes_(tokenizer.fingerprint() == "bytes"),
        sink_(sink),
        progress_(progress) {}

  TokenShardProgress& progress() { return state_; }

  absl::StatusOr<TokenDocument> Encode(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IoError(path, "cannot open the input");
    absl::StatusOr<TokenDocument> doc = EncodeFrom(fd, path);
    ::close(fd);
    return doc;
  }

 private:
  absl::StatusOr<TokenDocument> EncodeFrom(int fd, const std::string& path) {
    TokenDocument doc{.offset = sink_.tokens()};
    std::string text;  // Bytes not yet encoded, from file offset `at`.
    int64_t at = 0;
    for (bool eof = false; !eof;) {
      const size_t carry = text.size();
      text.resize(carry + o_.chunk_bytes);
      size_t got = 0;
      while (carry + got < text.size()) {
        const ssize_t r = ::read(fd, text.data() + carry + got, text.size() - carry - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return IoError(path, "read failed");
        if (r == 0) {
          eof = true;
          break;
        }
        got += static_cast<size_t>(r);
      }
      text.resize(carry + got);
      doc.bytes += static_cast<int64_t>(got);
      STRAIT_ASSIGN_OR_RETURN(const size_t cut, EncodablePrefix(text, at, eof, path));
      STRAIT_RETURN_IF_ERROR(Put(absl::string_view(text.data(), cut)));
      text.erase(0, cut);
      at += static_cast<int64_t>(cut);
      state_.bytes_read += static_cast<int64_t>(got);
      state_.tokens = sink_.tokens();
      if (progress_) progress_(state_);
    }
    doc.tokens = sink_.tokens() - doc.offset;
    return doc;
  }

  // How much of `text` (file offset `at`) to encode now: whole UTF-8 characters and, with
  // SentencePiece, whole lines unless the file ended or no newline is in sight.
  absl::StatusOr<size_t> EncodablePrefix(const std::string& text, int64_t at, bool eof,
                                         const std::string& path) const {
    size_t valid = text.size();
    if (const int64_t bad = FirstInvalidUtf8(text); bad >= 0) {
      // A character cut by the chunk's end is completed by the next chunk.
      if (eof || bad + 4 <= static_cast<int64_t>(text.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": not UTF-8 text (byte ", at + bad,
            " starts no valid character); convert it first, e.g. iconv -f LATIN1 -t UTF-8"));
      }
      valid = static_cast<size_t>(bad);
    }
    if (bytes_ || eof || valid == 0) return valid;
    const size_t newline = text.rfind('\n', valid - 1);
    return newline == std::string::npos ? valid : newline + 1;
  }

  absl::Status Put(absl::string_view piece) {
    if (piece.empty()) return absl::OkStatus();
    if (bytes_) {
      return sink_.Append(reinterpret_cast<const unsigned char*>(piece.data()),
                          static_cast<int64_t>(piece.size()));
    }
    STRAIT_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, tokenizer_.Encode(piece));
    return sink_.Append(ids.data(), static_cast<int64_t>(ids.size()));
  }

  const TokenShardOptions& o_;
  const Tokenizer& tokenizer_;
  const bool bytes_;  // Byte tokens: the text's bytes are its ids.
  ShardSink& sink_;
  const std::function<void(const TokenShardProgress&)>& progress_;
  TokenShardProgress state_;
};

// Removes files of an earlier run (shard-*.bin and temporaries) that `index` does not name.
void RemoveStaleShards(const std::string& dir, const TokenIndex& index) {
  std::set<std::string> keep;
  for (const TokenShard& s : index.shards) keep.insert(s.file);
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, error)) {
    const std::string name = e.path().filename().string();
    const bool ours = absl::StartsWith(name, "shard-") &&
                      (absl::EndsWith(name, ".bin") || absl::EndsWith(name, ".bin.tmp"));
    if (ours && keep.count(name) == 0) fs::remove(e.path(), error);
  }
}

absl::StatusOr<TokenDtype> ChooseDtype(const TokenShardOptions& o, int vocab) {
  const TokenDtype dtype =
      o.dtype.value_or(vocab <= 65536 ? TokenDtype::kUint16 : TokenDtype::kUint32);
  if (dtype == TokenDtype::kUint16 && vocab > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer's vocabulary of ", vocab,
                                                   " does not fit uint16; use --dtype uint32"));
  }
  return dtype;
}

}  // namespace

absl::StatusOr<TokenIndex> PrepareTokenShards(
    const TokenShardOptions& o, const Tokenizer& tokenizer,
    const std::function<void(const TokenShardProgress&)>& progress) {
  if (o.inputs.empty()) return absl::InvalidArgumentError("no input files");
  if (o.shard_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard tokens ", o.shard_tokens, ": a shard holds at least one token"));
  }
  if (o.chunk_bytes < 4) return absl::InvalidArgumentError("chunks of fewer than 4 bytes");
  TokenIndex index;
  index.vocab = tokenizer.vocab();
  index.tokenizer = tokenizer.fingerprint();
  STRAIT_ASSIGN_OR_RETURN(index.dtype, ChooseDtype(o, index.vocab));
  TokenShardProgress start;
  for (const std::string& input : o.inputs) {
    std::error_code error;
    const auto size = fs::file_size(input, error);
    if (error) {
      return absl::NotFoundError(
          absl::StrCat(input, ": cannot read the input (", error.message(), "); check the path"));
    }
    start.bytes_total += static_cast<int64_t>(size);
  }
  std::error_code error;
  fs::create_directories(o.out, error);
  if (error) return absl::InternalError(absl::StrCat(o.out, ": cannot make: ", error.message()));
  // From here on no index claims what the directory holds, until the new one is complete.
  const std::string index_path = (fs::path(o.out) / kTokenIndexFile).string();
  if (::unlink(index_path.c_str()) != 0 && errno != ENOENT) {
    return IoError(index_path, "cannot remove the old index");
  }
  ShardSink sink(o.out, index.dtype, o.shard_tokens);
  DocumentEncoder encoder(o, tokenizer, sink, progress);
  encoder.progress() = start;
  for (const std::string& input : o.inputs) {
    STRAIT_ASSIGN_OR_RETURN(TokenDocument doc, encoder.Encode(input));
    index.documents.push_back(doc);
  }
  index.tokens = sink.tokens();
  if (index.tokens == 0) return absl::InvalidArgumentError("the inputs hold no text, no tokens");
  STRAIT_ASSIGN_OR_RETURN(index.shards, sink.Finish());
  STRAIT_RETURN_IF_ERROR(WriteFileAtomically(index_path, FormatTokenIndex(index)));
  // The renames themselves reach the disk with the directory.
  if (const int dir = ::open(o.out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  RemoveStaleShards(o.out, index);
  return index;
}

}  // namespace strait::site
