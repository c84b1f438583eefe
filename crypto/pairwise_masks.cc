#include "crypto/pairwise_masks.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "crypto/hkdf.h"
#include "crypto/length_prefixed.h"

namespace strait::crypto {
namespace {

constexpr absl::string_view kMaskLabel = "strait/v1 mask";
constexpr size_t kStreamKeyBytes = 32, kStreamIvBytes = 16;

struct CipherCtxDeleter {
  void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
};

// The pair's stream key and IV (both ends derive the same: the lower id's end goes first).
absl::StatusOr<std::vector<uint8_t>> PairKey(absl::string_view federation, absl::string_view round,
                                             const LinkEnd& self, const EphemeralKey& mine,
                                             const LinkEnd& peer) {
  STRAIT_ASSIGN_OR_RETURN(auto secret, mine.SharedSecret(peer.public_key));
  std::string info(kMaskLabel);
  AppendField(&info, federation);
  AppendField(&info, round);
  const bool self_first = self.site_id < peer.site_id;
  for (const LinkEnd* end : {self_first ? &self : &peer, self_first ? &peer : &self}) {
    AppendField(&info, end->site_id);
    AppendU32(&info, end->epoch);
    AppendField(&info, AsString(end->public_key));
  }
  absl::StatusOr<std::vector<uint8_t>> key =
      HkdfSha256(secret, {}, AsBytes(info), kStreamKeyBytes + kStreamIvBytes);
  OPENSSL_cleanse(secret.data(), secret.size());
  return key;
}

// words[i] += sign * stream word i, the stream AES-256-CTR under `key` over zeros.
absl::Status AddStream(std::span<const uint8_t> key, bool add, std::span<uint32_t> words) {
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxDeleter> ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_ctr(), nullptr, key.data(),
                                 key.data() + kStreamKeyBytes) != 1) {
    return absl::InternalError("cannot start AES-256-CTR for a mask");
  }
  constexpr size_t kWordsPerBlock = 4096;
  static const std::array<uint8_t, 4 * kWordsPerBlock> kZeros{};
  std::array<uint8_t, 4 * kWordsPerBlock> stream;
  for (size_t at = 0; at < words.size(); at += kWordsPerBlock) {
    const size_t n = std::min(kWordsPerBlock, words.size() - at);
    int written = 0;
    if (EVP_EncryptUpdate(ctx.get(), stream.data(), &written, kZeros.data(),
                          static_cast<int>(4 * n)) != 1 ||
        written != static_cast<int>(4 * n)) {
      return absl::InternalError("AES-256-CTR failed while making a mask");
    }
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* b = stream.data() + 4 * i;
      const uint32_t w =
          uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
      words[at + i] = add ? words[at + i] + w : words[at + i] - w;
    }
  }
  OPENSSL_cleanse(stream.data(), stream.size());
  return absl::OkStatus();
}

}  // namespace

absl::Status AddPairwiseMasks(absl::string_view federation, absl::string_view round,
                              const LinkEnd& self, const EphemeralKey& mine,
                              std::span<const LinkEnd> peers, std::span<uint32_t> words) {
  std::set<std::string> ids = {self.site_id};
  for (const LinkEnd& peer : peers) {
    if (!ids.insert(peer.site_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica '", peer.site_id, "' appears twice among the masks' ends"));
    }
  }
  for (const LinkEnd& peer : peers) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<uint8_t> key, PairKey(federation, round, self, mine, peer));
    const absl::Status added = AddStream(key, self.site_id < peer.site_id, words);
    OPENSSL_cleanse(key.data(), key.size());
    STRAIT_RETURN_IF_ERROR(added);
  }
  return absl::OkStatus();
}

int64_t ToFixedPoint(std::span<const float> values, double scale, int32_t bound,
                     std::span<uint32_t> out) {
  int64_t clamped = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double scaled = std::round(static_cast<double>(values[i]) * scale);
    int64_t q = 0;
    if (std::isnan(scaled)) {
      ++clamped;
    } else if (scaled > bound || scaled < -static_cast<double>(bound)) {
      ++clamped;
      q = scaled > 0 ? bound : -int64_t{bound};
    } else {
      q = static_cast<int64_t>(scaled);
    }
    out[i] = static_cast<uint32_t>(q);  // Two's complement (mod 2^32).
  }
  return clamped;
}

void FromFixedPoint(std::span<const uint32_t> sum, double scale, std::span<float> out) {
  for (size_t i = 0; i < sum.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(static_cast<int32_t>(sum[i])) / scale);
  }
}

}  // namespace strait::crypto
