#include "site/data/mapped_token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strait::site {
namespace {

// A little-endian integer of `width` bytes at p.
inline uint32_t LoadToken(const unsigned char* p, int width) {
  if (width == 2) return uint32_t{p[0]} | uint32_t{p[1]} << 8;
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// A fault maps the page cache's whole folio, and a folio of a file just written or read ahead
// may be up to 2 MiB: dropping the page-table entries of the 2 MiB-aligned span around a read
// keeps the process's resident memory to the pages it is reading.
constexpr int64_t kUnmapSpan = int64_t{2} << 20;

}  // namespace

void MappedTokenShards::Unmap(const Mapping& m, int64_t begin, int64_t end) {
  const int64_t lo = begin / kUnmapSpan * kUnmapSpan;
  const int64_t hi =
      std::min(static_cast<int64_t>(m.bytes), (end + kUnmapSpan - 1) / kUnmapSpan * kUnmapSpan);
  // The pages stay in the page cache (MAP_SHARED, read-only): a later read faults them back in.
  ::madvise(const_cast<unsigned char*>(m.data) + lo, static_cast<size_t>(hi - lo), MADV_DONTNEED);
}

MappedTokenShards::MappedTokenShards(std::string dir, TokenIndex index)
    : dir_(std::move(dir)), index_(std::move(index)) {}

MappedTokenShards::~MappedTokenShards() {
  for (const Mapping& m : maps_) {
    if (m.data != nullptr) ::munmap(const_cast<unsigned char*>(m.data), m.bytes);
  }
}

absl::StatusOr<std::shared_ptr<const MappedTokenShards>> MappedTokenShards::Open(
    const std::string& dir, const TokenIndex& index) {
  std::shared_ptr<MappedTokenShards> shards(new MappedTokenShards(dir, index));
  const std::string index_path = (std::filesystem::path(dir) / kTokenIndexFile).string();
  int64_t first = 0;
  for (size_t k = 0; k < index.shards.size(); ++k) {
    const TokenShard& s = index.shards[k];
    Mapping m;
    m.path = (std::filesystem::path(dir) / s.file).string();
    m.first = first;
    m.tokens = s.tokens;
    const int fd = ::open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      const std::string why = absl::StrCat(m.path, ": cannot open shard ", k, " of ", index_path,
                                           " (", std::strerror(error), ")");
      return error == ENOENT ? absl::NotFoundError(absl::StrCat(
                                   why,
                                   "; the corpus is incomplete: run `strait data prepare` "
                                   "again, or copy the whole directory"))
                             : absl::PermissionDeniedError(why);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<int64_t>(st.st_size) != s.bytes) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(
          m.path, ": ", static_cast<int64_t>(st.st_size), " bytes, but ", index_path, " shards[", k,
          "] says ", s.tokens, " tokens of ", ToString(index.dtype), " = ", s.bytes,
          " bytes (a truncated copy or an interrupted write); copy or prepare it again"));
    }
    m.bytes = static_cast<size_t>(s.bytes);
    void* p = ::mmap(nullptr, m.bytes, PROT_READ, MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);  // The mapping keeps the file.
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat(m.path, ": cannot map the shard (", std::strerror(error), ")"));
    }
    // Windows are sampled at random: read-ahead would only bring in pages nobody reads.
    ::madvise(p, m.bytes, MADV_RANDOM);
    m.data = static_cast<const unsigned char*>(p);
    shards->maps_.push_back(std::move(m));
    first += s.tokens;
  }
  return std::shared_ptr<const MappedTokenShards>(std::move(shards));
}

absl::Status MappedTokenShards::Read(int64_t begin, int64_t n, int32_t* out) const {
  if (begin < 0 || n < 0 || begin + n > index_.tokens) {
    return absl::OutOfRangeError(absl::StrCat("tokens [", begin, ", ", begin + n,
                                              ") are not in the stream of ", index_.tokens));
  }
  const int width = TokenWidth(index_.dtype);
  // The first shard that ends after `begin`.
  auto it = std::upper_bound(maps_.begin(), maps_.end(), begin,
                             [](int64_t t, const Mapping& m) { return t < m.first + m.tokens; });
  for (int64_t done = 0; done < n; ++it) {
    const Mapping& m = *it;
    const int64_t from = begin + done - m.first;
    const int64_t count = std::min(n - done, m.tokens - from);
    const unsigned char* p = m.data + from * width;
    for (int64_t i = 0; i < count; ++i, p += width) {
      const uint32_t token = LoadToken(p, width);
      if (token >= static_cast<uint32_t>(index_.vocab)) {
        return absl::DataLossError(absl::StrCat(m.path, ": token ", from + i, " of the shard is ",
                                                token, ", not in the vocabulary [0, ", index_.vocab,
                                                ") of ", dir_, "/", kTokenIndexFile,
                                                "; the shard is damaged: prepare it again"));
      }
      out[done + i] = static_cast<int32_t>(token);
    }
    Unmap(m, from * width, (from + count) * width);
    done += count;
  }
  return absl::OkStatus();
}

}  // namespace strait::site
