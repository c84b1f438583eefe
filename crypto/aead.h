// Sealing of frame bodies between neighbouring sites (DESIGN.md §5): AES-256-GCM with a
// per-direction key, a nonce made from a per-direction 64-bit counter, and AAD chosen by the caller
// (the tensor key and frame header bytes).
//
// Sealed body layout: ciphertext (as long as the plaintext) || 16-byte GCM tag. The sequence number
// and key epoch are not in the body; they travel in the frame header (FrameHeader.sequence,
// FrameHeader.key_epoch) and are bound by the nonce and the key, so the AAD need not repeat them.
//
// Nonce (96 bits) = 4-byte per-direction salt from the key schedule || sequence as 64-bit big
// endian. Sequence numbers start at 0 and increase by one per sealed frame, so a nonce never
// repeats under a key; a Sealer retires its key (refuses to seal) before the counter wraps and
// after its configured byte budget, and the caller then re-keys (a new key exchange,
// docs/security.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "crypto/openssl_check.h"
#include "crypto/replay_window.h"

namespace strait::crypto {

inline constexpr size_t kAeadKeySize = 32;   // AES-256.
inline constexpr size_t kNonceSaltSize = 4;  // Fixed part of the 96-bit nonce.
inline constexpr size_t kTagSize = 16;       // GCM tag appended to every sealed body.

// Key material for one direction of one link, as derived by DeriveLinkKeys. The destructor wipes
// it. Copyable (a Sealer/Opener keeps its own cipher context, not a reference to this).
struct DirectionKey {
  std::array<uint8_t, kAeadKeySize> key{};
  std::array<uint8_t, kNonceSaltSize> nonce_salt{};
  uint32_t key_epoch = 0;  // Which exchange produced the key; sent as FrameHeader.key_epoch.

  DirectionKey() = default;
  DirectionKey(const DirectionKey&) = default;
  DirectionKey& operator=(const DirectionKey&) = default;
  ~DirectionKey();
};

// Why Open refused a body. Each has its own code so that sites and the gateway can count them.
enum class OpenError {
  kTruncated,    // Shorter than a tag, or shorter than the length the frame header declares.
  kWrongKey,     // Sealed under another key epoch than this Opener's key.
  kReplayed,     // This sequence number was already opened successfully.
  kOutOfWindow,  // Sequence number below the replay window (too old to tell).
  // Authentication failed: modified ciphertext or tag, other AAD (e.g. a misaddressed frame), a key
  // of the same epoch that differs, or extra bytes. GCM cannot tell these apart, by design.
  kTampered,
};

// "truncated", "wrong_key", "replayed", "out_of_window", "tampered": stable names for metrics.
absl::string_view OpenErrorName(OpenError error);

// The OpenError carried by a Status returned from Opener, or nullopt for any other Status.
std::optional<OpenError> GetOpenError(const absl::Status& status);

// Seals frames for one direction of one link. Thread-safe: concurrent calls are serialised, so each
// frame gets its own sequence number. Does not block on anything but that lock.
class Sealer {
 public:
  // `max_bytes`: plaintext bytes this key may seal before it is retired (the link's rotate_bytes).
  static absl::StatusOr<std::unique_ptr<Sealer>> Create(const DirectionKey& key,
                                                        uint64_t max_bytes);

  // Encrypts buffer[0, plaintext_size) in place and writes the tag to
  // buffer[plaintext_size, plaintext_size + kTagSize); `buffer` must hold both. Returns the
  // sequence number used (put it in FrameHeader.sequence). `aad` must be the bytes the receiver
  // passes to Open. Fails with kResourceExhausted once the key is retired, kInvalidArgument on a
  // short buffer.
  absl::StatusOr<uint64_t> SealInPlace(std::span<const uint8_t> aad, std::span<uint8_t> buffer,
                                       size_t plaintext_size);

  struct Sealed {
    uint64_t sequence = 0;
    std::vector<uint8_t> body;  // ciphertext || tag
  };
  // Convenience that copies `plaintext` into a new buffer and seals it there.
  absl::StatusOr<Sealed> Seal(std::span<const uint8_t> aad, std::span<const uint8_t> plaintext);

  uint32_t key_epoch() const { return key_epoch_; }
  // Plaintext bytes sealed so far, and whether the key is retired (every further Seal fails).
  uint64_t bytes_sealed() const;
  bool retired() const;

 private:
  Sealer(EvpCipherCtxPtr ctx, const DirectionKey& key, uint64_t max_bytes);

  const uint32_t key_epoch_;
  const uint64_t max_bytes_;
  std::array<uint8_t, kNonceSaltSize> salt_;
  mutable std::mutex mu_;
  EvpCipherCtxPtr ctx_;         // Keyed once; each frame only sets its nonce. Guarded by mu_.
  uint64_t next_sequence_ = 0;  // Guarded by mu_.
  uint64_t bytes_sealed_ = 0;   // Guarded by mu_.
};

// Opens frames of one direction of one link and rejects replays. Thread-safe (serialised).
class Opener {
 public:
  // `window`: how far below the highest accepted sequence number a frame may still arrive
  // (reordering tolerance); rounded up to a multiple of 64.
  static absl::StatusOr<std::unique_ptr<Opener>> Create(const DirectionKey& key,
                                                        uint64_t window = 1024);

  // What the frame header says about the body. The sequence and key epoch are authenticated through
  // the nonce and the key; the sender must put the declared size (wire_bytes) in the AAD.
  struct FrameInfo {
    uint64_t sequence = 0;
    uint32_t key_epoch = 0;
    uint64_t sealed_size = 0;  // FrameHeader.wire_bytes: the body length the sender produced.
  };

  // Authenticates and decrypts `body` (ciphertext || tag) in place. On success returns the
  // plaintext size (the plaintext is body[0, size)) and records the sequence number as seen. On
  // failure returns a Status carrying an OpenError (see GetOpenError) and leaves no unauthenticated
  // plaintext in `body` (it is zeroed); the replay window is unchanged.
  absl::StatusOr<size_t> OpenInPlace(const FrameInfo& info, std::span<const uint8_t> aad,
                                     std::span<uint8_t> body);

  // Convenience that copies `body` and opens the copy.
  absl::StatusOr<std::vector<uint8_t>> Open(const FrameInfo& info, std::span<const uint8_t> aad,
                                            std::span<const uint8_t> body);

  uint32_t key_epoch() const { return key_epoch_; }

 private:
  Opener(EvpCipherCtxPtr ctx, const DirectionKey& key, uint64_t window);

  const uint32_t key_epoch_;
  std::array<uint8_t, kNonceSaltSize> salt_;
  std::mutex mu_;
  EvpCipherCtxPtr ctx_;  // Guarded by mu_.
  ReplayWindow window_;  // Guarded by mu_.
};

// Views of contiguous bytes as spans of uint8_t (std::string, std::vector<char>, ...).
inline std::span<const uint8_t> AsBytes(absl::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace strait::crypto
