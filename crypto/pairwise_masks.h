// Masks for secure aggregation (DESIGN.md §5; Bonawitz et al., "Practical Secure Aggregation for
// Privacy-Preserving Machine Learning", 2017, without its dropout recovery): the replicas of a
// stage sum their vectors through the gateway without it learning any one of them.
//
// Each replica turns its vector into fixed point in Z/2^32 (ToFixedPoint) and adds its mask: for
// every other replica j, +PRG(k_ij) when its own site id sorts before j's, -PRG(k_ij) after, where
//   k_ij = HKDF-SHA256(ikm = X25519(i, j), salt = empty,
//                      info = "strait/v1 mask" || lp(federation) || lp(round)
//                             || (lp(id) || be32(epoch) || lp(public key)) of both ends, the
//                                lower id first)
// and PRG is AES-256-CTR (key k_ij[0, 32), IV k_ij[32, 48)) over zeros, read as little-endian
// 32-bit words. The two ends of a pair derive the same stream and add it with opposite signs, so
// the masks of all replicas sum to zero mod 2^32: the gateway's sum of the masked vectors is the
// sum of the fixed-point vectors, bit for bit. A masked vector alone is one-time-padded by streams
// whose keys only its replica's peers hold; the gateway holds none (it relays signed public keys).
// `round` must never repeat under the same keys (a stream used twice would reveal the difference of
// two vectors): callers bind the stage, the step and the rollback generation into it.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "crypto/key_exchange.h"

namespace strait::crypto {

// Adds this replica's mask for `round` to `words` (mod 2^32). `self` is this replica's end and
// `mine` its private key; `peers` the stage's other replicas (their SignedKeys verified with
// VerifySignedKey). InvalidArgument when a peer has this replica's id or two peers share one.
absl::Status AddPairwiseMasks(absl::string_view federation, absl::string_view round,
                              const LinkEnd& self, const EphemeralKey& mine,
                              std::span<const LinkEnd> peers, std::span<uint32_t> words);

// values * scale rounded to the nearest integer (ties away from zero), clamped to [-bound, bound],
// in two's complement: what each replica masks. `bound` keeps the sum of R vectors inside int32
// (at most (2^31 - 1) / R). Returns how many values were clamped (NaN counts as clamped, to 0).
int64_t ToFixedPoint(std::span<const float> values, double scale, int32_t bound,
                     std::span<uint32_t> out);

// A sum of fixed-point vectors back to floats: each word as a two's complement int32, / scale.
void FromFixedPoint(std::span<const uint32_t> sum, double scale, std::span<float> out);

}  // namespace strait::crypto
