#include "crypto/aead.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::crypto {
namespace {

constexpr size_t kNonceSize = 12;
constexpr absl::string_view kOpenErrorPayload = "strait.crypto.OpenError";
// EVP's update functions take int lengths; larger buffers go through in pieces of this size.
constexpr size_t kMaxUpdate = size_t{1} << 30;

std::array<uint8_t, kNonceSize> MakeNonce(const std::array<uint8_t, kNonceSaltSize>& salt,
                                          uint64_t sequence) {
  std::array<uint8_t, kNonceSize> nonce;
  std::memcpy(nonce.data(), salt.data(), kNonceSaltSize);
  for (int i = 0; i < 8; ++i)
    nonce[kNonceSaltSize + i] = static_cast<uint8_t>(sequence >> (56 - 8 * i));
  return nonce;
}

// A keyed AES-256-GCM context for encryption or decryption; frames only set their nonce.
absl::StatusOr<EvpCipherCtxPtr> MakeContext(const DirectionKey& key, bool encrypt) {
  EvpCipherCtxPtr ctx(EVP_CIPHER_CTX_new());
  STRAIT_OPENSSL_CHECK(ctx.get());
  STRAIT_OPENSSL_CHECK(EVP_CipherInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.key.data(),
                                         nullptr, encrypt ? 1 : 0));
  return ctx;
}

// Runs the data through EVP_CipherUpdate in pieces (in place when out == in; out may be null for
// AAD).
absl::Status Update(EVP_CIPHER_CTX* ctx, uint8_t* out, const uint8_t* in, size_t size) {
  for (size_t done = 0; done < size;) {
    const int piece = static_cast<int>(std::min(size - done, kMaxUpdate));
    int written = 0;
    STRAIT_OPENSSL_CHECK(
        EVP_CipherUpdate(ctx, out ? out + done : nullptr, &written, in + done, piece) == 1);
    done += piece;
  }
  return absl::OkStatus();
}

absl::Status OpenFailure(OpenError error, absl::string_view detail) {
  absl::Status status;
  switch (error) {
    case OpenError::kReplayed:
      status = absl::AlreadyExistsError(detail);
      break;
    case OpenError::kOutOfWindow:
      status = absl::OutOfRangeError(detail);
      break;
    case OpenError::kWrongKey:
      status = absl::FailedPreconditionError(detail);
      break;
    case OpenError::kTruncated:
    case OpenError::kTampered:
      status = absl::DataLossError(detail);
      break;
  }
  status.SetPayload(kOpenErrorPayload, absl::Cord(OpenErrorName(error)));
  return status;
}

}  // namespace

DirectionKey::~DirectionKey() {
  OPENSSL_cleanse(key.data(), key.size());
  OPENSSL_cleanse(nonce_salt.data(), nonce_salt.size());
}

absl::string_view OpenErrorName(OpenError error) {
  switch (error) {
    case OpenError::kTruncated:
      return "truncated";
    case OpenError::kWrongKey:
      return "wrong_key";
    case OpenError::kReplayed:
      return "replayed";
    case OpenError::kOutOfWindow:
      return "out_of_window";
    case OpenError::kTampered:
      return "tampered";
  }
  return "unknown";
}

std::optional<OpenError> GetOpenError(const absl::Status& status) {
  auto payload = status.GetPayload(kOpenErrorPayload);
  if (!payload) return std::nullopt;
  for (OpenError e : {OpenError::kTruncated, OpenError::kWrongKey, OpenError::kReplayed,
                      OpenError::kOutOfWindow, OpenError::kTampered}) {
    if (*payload == OpenErrorName(e)) return e;
  }
  return std::nullopt;
}

// ---- Sealer ----

Sealer::Sealer(EvpCipherCtxPtr ctx, const DirectionKey& key, uint64_t max_bytes)
    : key_epoch_(key.key_epoch),
      max_bytes_(max_bytes),
      salt_(key.nonce_salt),
      ctx_(std::move(ctx)) {}

absl::StatusOr<std::unique_ptr<Sealer>> Sealer::Create(const DirectionKey& key,
                                                       uint64_t max_bytes) {
  STRAIT_ASSIGN_OR_RETURN(EvpCipherCtxPtr ctx, MakeContext(key, /*encrypt=*/true));
  return std::unique_ptr<Sealer>(new Sealer(std::move(ctx), key, max_bytes));
}

uint64_t Sealer::bytes_sealed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_sealed_;
}

bool Sealer::retired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_sealed_ >= max_bytes_ || next_sequence_ == std::numeric_limits<uint64_t>::max();
}

absl::StatusOr<uint64_t> Sealer::SealInPlace(std::span<const uint8_t> aad,
                                             std::span<uint8_t> buffer, size_t plaintext_size) {
  if (buffer.size() < plaintext_size || buffer.size() - plaintext_size < kTagSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("Seal: buffer of ", buffer.size(), " bytes cannot hold ", plaintext_size,
                     " bytes of plaintext and a ", kTagSize, "-byte tag"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  // The last counter value is never used, so a sequence number never wraps to a used nonce.
  if (next_sequence_ == std::numeric_limits<uint64_t>::max() || bytes_sealed_ >= max_bytes_ ||
      max_bytes_ - bytes_sealed_ < plaintext_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Seal: key epoch ", key_epoch_, " is retired after ", bytes_sealed_,
                     " bytes in ", next_sequence_, " frames; re-key the link"));
  }
  const uint64_t sequence = next_sequence_;
  const std::array<uint8_t, kNonceSize> nonce = MakeNonce(salt_, sequence);
  EVP_CIPHER_CTX* ctx = ctx_.get();
  STRAIT_OPENSSL_CHECK(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()));
  // The counter is consumed as soon as the nonce is set: a failure below never leads to its reuse.
  ++next_sequence_;
  STRAIT_RETURN_IF_ERROR(Update(ctx, nullptr, aad.data(), aad.size()));
  STRAIT_RETURN_IF_ERROR(Update(ctx, buffer.data(), buffer.data(), plaintext_size));
  int final_size = 0;
  STRAIT_OPENSSL_CHECK(EVP_EncryptFinal_ex(ctx, buffer.data() + plaintext_size, &final_size));
  STRAIT_OPENSSL_CHECK(
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagSize, buffer.data() + plaintext_size));
  bytes_sealed_ += plaintext_size;
  return sequence;
}

absl::StatusOr<Sealer::Sealed> Sealer::Seal(std::span<const uint8_t> aad,
                                            std::span<const uint8_t> plaintext) {
  Sealed sealed;
  sealed.body.resize(plaintext.size() + kTagSize);
  if (!plaintext.empty()) std::memcpy(sealed.body.data(), plaintext.data(), plaintext.size());
  STRAIT_ASSIGN_OR_RETURN(sealed.sequence, SealInPlace(aad, sealed.body, plaintext.size()));
  return sealed;
}

// ---- Opener ----

Opener::Opener(EvpCipherCtxPtr ctx, const DirectionKey& key, uint64_t window)
    : key_epoch_(key.key_epoch), salt_(key.nonce_salt), ctx_(std::move(ctx)), window_(window) {}

absl::StatusOr<std::unique_ptr<Opener>> Opener::Create(const DirectionKey& key, uint64_t window) {
  STRAIT_ASSIGN_OR_RETURN(EvpCipherCtxPtr ctx, MakeContext(key, /*encrypt=*/false));
  return std::unique_ptr<Opener>(new Opener(std::move(ctx), key, window));
}

absl::StatusOr<size_t> Opener::OpenInPlace(const FrameInfo& info, std::span<const uint8_t> aad,
                                           std::span<uint8_t> body) {
  if (body.size() < kTagSize || body.size() < info.sealed_size) {
    return OpenFailure(
        OpenError::kTruncated,
        absl::StrCat("Open: body of ", body.size(), " bytes is truncated (header says ",
                     info.sealed_size, ", a tag alone is ", kTagSize, ")"));
  }
  if (body.size() > info.sealed_size) {
    return OpenFailure(OpenError::kTampered,
                       absl::StrCat("Open: body of ", body.size(), " bytes is longer than the ",
                                    info.sealed_size, " the header says"));
  }
  if (info.key_epoch != key_epoch_) {
    return OpenFailure(OpenError::kWrongKey,
                       absl::StrCat("Open: frame sealed under key epoch ", info.key_epoch,
                                    ", this link has ", key_epoch_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  switch (window_.Check(info.sequence)) {
    case ReplayWindow::Verdict::kFresh:
      break;
    case ReplayWindow::Verdict::kReplayed:
      return OpenFailure(OpenError::kReplayed,
                         absl::StrCat("Open: sequence ", info.sequence, " was already opened"));
    case ReplayWindow::Verdict::kTooOld:
      return OpenFailure(OpenError::kOutOfWindow,
                         absl::StrCat("Open: sequence ", info.sequence,
                                      " is below the replay window of ", window_.size()));
  }
  const size_t plaintext_size = body.size() - kTagSize;
  const std::array<uint8_t, kNonceSize> nonce = MakeNonce(salt_, info.sequence);
  EVP_CIPHER_CTX* ctx = ctx_.get();
  STRAIT_OPENSSL_CHECK(EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()));
  // The expected tag goes in first, so nothing can fail between decryption and the tag check.
  STRAIT_OPENSSL_CHECK(
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagSize, body.data() + plaintext_size));
  STRAIT_RETURN_IF_ERROR(Update(ctx, nullptr, aad.data(), aad.size()));
  if (absl::Status status = Update(ctx, body.data(), body.data(), plaintext_size); !status.ok()) {
    OPENSSL_cleanse(body.data(), body.size());  // Partly decrypted, never authenticated.
    return status;
  }
  int final_size = 0;
  if (EVP_DecryptFinal_ex(ctx, body.data() + plaintext_size, &final_size) != 1) {
    ERR_clear_error();
    OPENSSL_cleanse(body.data(), body.size());
    return OpenFailure(OpenError::kTampered,
                       absl::StrCat("Open: authentication failed for sequence ", info.sequence,
                                    " (tampered bytes, other AAD or another key)"));
  }
  window_.Accept(info.sequence);
  return plaintext_size;
}

absl::StatusOr<std::vector<uint8_t>> Opener::Open(const FrameInfo& info,
                                                  std::span<const uint8_t> aad,
                                                  std::span<const uint8_t> body) {
  std::vector<uint8_t> copy(body.begin(), body.end());
  STRAIT_ASSIGN_OR_RETURN(size_t size, OpenInPlace(info, aad, copy));
  copy.resize(size);
  return copy;
}

}  // namespace strait::crypto
