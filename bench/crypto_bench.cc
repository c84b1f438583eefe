// `strait bench crypto [--json]`: Seal/Open throughput beside the raw EVP AES-256-GCM loop on the
// same buffers in the same run (the ratio is the figure; issue 4 asks for >= 90% at 1 MiB), and the
// cost of one key exchange as a site performs it at join.
//
// Method: for each frame size, frames alternate the four loops (raw encrypt, Seal, raw decrypt,
// Open) so that machine noise hits them alike; each loop's figure is its median frame time. Each
// frame is timed alone; untimed between frames:
// restoring the sealed bytes before a decryption and, for Open, a fresh Opener (its replay window
// would refuse the same sequence twice; the raw loop also keeps its keyed context across frames).
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "core/status.h"
#include "crypto/aead.h"
#include "crypto/certificates.h"
#include "crypto/key_exchange.h"
#include "crypto/openssl_check.h"

namespace strait::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kAadSize = 64;  // About a serialized TensorKey + FrameHeader.

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The raw loop: one context keyed once, per frame only the IV, AAD, data, tag.
class RawGcm {
 public:
  explicit RawGcm(const crypto::DirectionKey& key) : key_(key) {}
  bool Encrypt(uint64_t counter, const uint8_t* aad, uint8_t* data, size_t size, uint8_t* tag) {
    return Run(enc_.get(), 1, counter, aad, data, size, tag);
  }
  bool Decrypt(uint64_t counter, const uint8_t* aad, uint8_t* data, size_t size, uint8_t* tag) {
    return Run(dec_.get(), 0, counter, aad, data, size, tag);
  }
  bool Init() {
    return EVP_EncryptInit_ex(enc_.get(), EVP_aes_256_gcm(), nullptr, key_.key.data(), nullptr) ==
               1 &&
           EVP_DecryptInit_ex(dec_.get(), EVP_aes_256_gcm(), nullptr, key_.key.data(), nullptr) ==
               1;
  }

 private:
  bool Run(EVP_CIPHER_CTX* ctx, int enc, uint64_t counter, const uint8_t* aad, uint8_t* data,
           size_t size, uint8_t* tag) {
    uint8_t iv[12];
    std::memcpy(iv, key_.nonce_salt.data(), 4);
    for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(counter >> (56 - 8 * i));
    int n = 0;
    if (EVP_CipherInit_ex(ctx, nullptr, nullptr, nullptr, iv, enc) != 1) return false;
    if (EVP_CipherUpdate(ctx, nullptr, &n, aad, kAadSize) != 1) return false;
    if (EVP_CipherUpdate(ctx, data, &n, data, static_cast<int>(size)) != 1) return false;
    if (!enc && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1) return false;
    if (EVP_CipherFinal_ex(ctx, data + size, &n) != 1) return false;
    return !enc || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1;
  }
  crypto::DirectionKey key_;
  crypto::EvpCipherCtxPtr enc_{EVP_CIPHER_CTX_new()};
  crypto::EvpCipherCtxPtr dec_{EVP_CIPHER_CTX_new()};
};

struct SizeResult {
  size_t frame_bytes = 0;
  double raw_encrypt_gbps = 0, seal_gbps = 0, raw_decrypt_gbps = 0, open_gbps = 0;
  double seal_ratio = 0, open_ratio = 0;  // Median over frames of raw time / Strait time.
};

absl::StatusOr<SizeResult> MeasureSize(size_t size, size_t bytes_per_round, int rounds) {
  crypto::DirectionKey key;
  for (size_t i = 0; i < key.key.size(); ++i) key.key[i] = static_cast<uint8_t>(i * 7 + 1);
  key.nonce_salt = {1, 2, 3, 4};
  RawGcm raw(key);
  if (!raw.Init()) return absl::InternalError("EVP init failed");
  STRAIT_ASSIGN_OR_RETURN(auto sealer, crypto::Sealer::Create(key, ~uint64_t{0}));
  std::vector<uint8_t> aad(kAadSize, 0xa5);
  std::vector<uint8_t> buffer(size + crypto::kTagSize, 0x5a), pristine;
  const size_t frames = std::max<size_t>(5, bytes_per_round / size);  // >= 40 samples per loop

  // A sealed frame (sequence 0 of a fresh Sealer) for the decryption loops to restore from.
  STRAIT_ASSIGN_OR_RETURN(auto first, crypto::Sealer::Create(key, ~uint64_t{0}));
  STRAIT_ASSIGN_OR_RETURN(uint64_t sequence0, first->SealInPlace(aad, buffer, size));
  pristine = buffer;

  std::vector<Clock::duration> raw_enc, seal, raw_dec, open;
  uint64_t raw_counter = 0;
  // Interleaved frame by frame, so that noise from other processes hits all four loops alike.
  for (int round = 0; round < rounds; ++round) {
    for (size_t f = 0; f < frames; ++f) {
      auto t0 = Clock::now();
      const bool enc_ok =
          raw.Encrypt(raw_counter++, aad.data(), buffer.data(), size, buffer.data() + size);
      raw_enc.push_back(Clock::now() - t0);
      if (!enc_ok) return absl::InternalError("raw encrypt failed");

      t0 = Clock::now();
      absl::StatusOr<uint64_t> sealed = sealer->SealInPlace(aad, buffer, size);
      seal.push_back(Clock::now() - t0);
      STRAIT_RETURN_IF_ERROR(sealed.status());

      std::memcpy(buffer.data(), pristine.data(), buffer.size());
      t0 = Clock::now();
      const bool dec_ok =
          raw.Decrypt(sequence0, aad.data(), buffer.data(), size, buffer.data() + size);
      raw_dec.push_back(Clock::now() - t0);
      if (!dec_ok) return absl::InternalError("raw decrypt failed");

      std::memcpy(buffer.data(), pristine.data(), buffer.size());
      STRAIT_ASSIGN_OR_RETURN(auto opener, crypto::Opener::Create(key));
      t0 = Clock::now();
      absl::StatusOr<size_t> opened =
          opener->OpenInPlace({sequence0, key.key_epoch, buffer.size()}, aad, buffer);
      open.push_back(Clock::now() - t0);
      STRAIT_RETURN_IF_ERROR(opened.status());
    }
  }
  // Medians: robust against the preemptions of a shared machine. The ratios pair each Strait frame
  // with the raw frame timed just before it, so that slow phases of the machine cancel out.
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  auto gbps = [&](const std::vector<Clock::duration>& times) {
    std::vector<double> rates;
    for (Clock::duration t : times) rates.push_back(static_cast<double>(size) / 1e9 / Seconds(t));
    return median(rates);
  };
  auto ratio = [&](const std::vector<Clock::duration>& raw,
                   const std::vector<Clock::duration>& ours) {
    std::vector<double> ratios;
    for (size_t i = 0; i < raw.size(); ++i) ratios.push_back(Seconds(raw[i]) / Seconds(ours[i]));
    return median(ratios);
  };
  return SizeResult{size,       gbps(raw_enc),        gbps(seal),          gbps(raw_dec),
                    gbps(open), ratio(raw_enc, seal), ratio(raw_dec, open)};
}

struct ExchangeResult {
  int iterations = 0;
  double generate_us = 0, sign_us = 0, verify_us = 0, derive_us = 0, total_us = 0;
};

// One site's work per neighbour at join: make a key, sign it, verify the neighbour's, derive. The
// site's own signing key and the CA are parsed once at start-up, not per exchange.
absl::StatusOr<ExchangeResult> MeasureExchange(int iterations) {
  STRAIT_ASSIGN_OR_RETURN(crypto::CertifiedKey ca_pair, crypto::CreateCa("bench"));
  STRAIT_ASSIGN_OR_RETURN(crypto::CertifiedKey east, crypto::IssueSiteCertificate(ca_pair, "east"));
  STRAIT_ASSIGN_OR_RETURN(crypto::CertifiedKey west, crypto::IssueSiteCertificate(ca_pair, "west"));
  STRAIT_ASSIGN_OR_RETURN(auto ca, crypto::CertificateVerifier::Create(ca_pair.certificate_pem));
  STRAIT_ASSIGN_OR_RETURN(auto east_signer, crypto::KeySigner::Create(east));
  STRAIT_ASSIGN_OR_RETURN(auto west_signer, crypto::KeySigner::Create(west));
  STRAIT_ASSIGN_OR_RETURN(auto west_key, crypto::EphemeralKey::Generate());
  STRAIT_ASSIGN_OR_RETURN(auto west_signed, west_signer.Sign("bench", 1, west_key));
  STRAIT_ASSIGN_OR_RETURN(auto west_end, crypto::LinkEndOf(west_signed));
  const crypto::DenyList deny;
  std::vector<Clock::duration> generate, sign, verify, derive, total;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    STRAIT_ASSIGN_OR_RETURN(auto mine, crypto::EphemeralKey::Generate());
    auto t1 = Clock::now();
    STRAIT_ASSIGN_OR_RETURN(auto signed_key, east_signer.Sign("bench", 1, mine));
    auto t2 = Clock::now();
    STRAIT_RETURN_IF_ERROR(crypto::VerifySignedKey("bench", "west", west_signed, ca, deny));
    auto t3 = Clock::now();
    STRAIT_ASSIGN_OR_RETURN(auto self, crypto::LinkEndOf(signed_key));
    STRAIT_ASSIGN_OR_RETURN(auto keys, crypto::DeriveLinkKeys("bench", self, mine, west_end));
    auto t4 = Clock::now();
    generate.push_back(t1 - t0), sign.push_back(t2 - t1), verify.push_back(t3 - t2);
    derive.push_back(t4 - t3), total.push_back(t4 - t0);
  }
  // Medians, as for the frames.
  auto us = [](std::vector<Clock::duration>& times) {
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return Seconds(times[times.size() / 2]) * 1e6;
  };
  return ExchangeResult{iterations, us(generate), us(sign), us(verify), us(derive), us(total)};
}

absl::Status Run(bool json, double seconds_scale) {
  std::vector<SizeResult> sizes;
  const int rounds = 8;
  const size_t bytes_per_round = static_cast<size_t>(32e6 * seconds_scale);
  for (size_t size : {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20}) {
    STRAIT_ASSIGN_OR_RETURN(SizeResult r,
                            MeasureSize(size, std::max(bytes_per_round, size), rounds));
    sizes.push_back(r);
  }
  STRAIT_ASSIGN_OR_RETURN(ExchangeResult exchange,
                          MeasureExchange(std::max(10, static_cast<int>(200 * seconds_scale))));
  if (json) {
    nlohmann::json out;
    for (const SizeResult& r : sizes) {
      out["aead"].push_back({{"frame_bytes", r.frame_bytes},
                             {"raw_encrypt_gbps", r.raw_encrypt_gbps},
                             {"seal_gbps", r.seal_gbps},
                             {"seal_ratio", r.seal_ratio},
                             {"raw_decrypt_gbps", r.raw_decrypt_gbps},
                             {"open_gbps", r.open_gbps},
                             {"open_ratio", r.open_ratio}});
    }
    out["key_exchange"] = {
        {"iterations", exchange.iterations}, {"generate_us", exchange.generate_us},
        {"sign_us", exchange.sign_us},       {"verify_us", exchange.verify_us},
        {"derive_us", exchange.derive_us},   {"total_us", exchange.total_us}};
    std::printf("%s\n", out.dump(2).c_str());
    return absl::OkStatus();
  }
  std::printf(
      "AES-256-GCM, one thread, median GB/s (1e9 bytes/s); ratio = median of paired frames, raw "
      "EVP "
      "loop time / Strait time\n");
  std::printf("%10s %10s %8s %7s %10s %8s %7s\n", "frame", "raw enc", "Seal", "ratio", "raw dec",
              "Open", "ratio");
  for (const SizeResult& r : sizes) {
    std::printf("%9zuK %10.2f %8.2f %6.1f%% %10.2f %8.2f %6.1f%%\n", r.frame_bytes >> 10,
                r.raw_encrypt_gbps, r.seal_gbps, 100 * r.seal_ratio, r.raw_decrypt_gbps,
                r.open_gbps, 100 * r.open_ratio);
  }
  std::printf(
      "\nkey exchange (one site, one neighbour; medians of %d): %.0f us = X25519 keygen %.0f + "
      "sign "
      "%.0f + verify chain and signature %.0f + X25519 and HKDF %.0f\n",
      exchange.iterations, exchange.total_us, exchange.generate_us, exchange.sign_us,
      exchange.verify_us, exchange.derive_us);
  return absl::OkStatus();
}

}  // namespace

void AddBenchCryptoCommand(CLI::App& bench, int* exit_code) {
  CLI::App* crypto = bench.add_subcommand(
      "crypto",
      "Seal/Open GB/s for 64 KiB, 1 MiB and 16 MiB frames beside the raw EVP AES-256-GCM "
      "loop, and the cost of one key exchange");
  auto json = std::make_shared<bool>(false);
  auto scale = std::make_shared<double>(1.0);
  crypto->add_flag("--json", *json, "Print JSON instead of a table");
  crypto->add_option("--scale", *scale, "Multiply the amount of work (and the run time)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 100.0));
  crypto->callback([=] {
    absl::Status status = Run(*json, *scale);
    if (!status.ok()) {
      std::fprintf(stderr, "strait bench crypto: %s\n", std::string(status.message()).c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace strait::bench
