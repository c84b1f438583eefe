#include "crypto/aead.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "tests/unit/crypto/hex.h"

namespace strait::crypto {
namespace {

using testing::Hex;
using testing::ToHex;

DirectionKey MakeKey(const std::string& key_hex, const std::string& salt_hex, uint32_t epoch = 0) {
  DirectionKey key;
  const std::vector<uint8_t> k = Hex(key_hex), s = Hex(salt_hex);
  std::memcpy(key.key.data(), k.data(), k.size());
  std::memcpy(key.nonce_salt.data(), s.data(), s.size());
  key.key_epoch = epoch;
  return key;
}

DirectionKey RandomKey(uint32_t epoch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  DirectionKey key;
  for (auto& b : key.key) b = static_cast<uint8_t>(rng());
  for (auto& b : key.nonce_salt) b = static_cast<uint8_t>(rng());
  key.key_epoch = epoch;
  return key;
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

Opener::FrameInfo Info(uint64_t sequence, uint32_t epoch, size_t sealed_size) {
  return {.sequence = sequence, .key_epoch = epoch, .sealed_size = sealed_size};
}

// McGrew & Viega, "The Galois/Counter Mode of Operation (GCM)", test cases 13-16 (AES-256).
constexpr char kZeroKey[] = "0000000000000000000000000000000000000000000000000000000000000000";
constexpr char kKey15[] = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
constexpr char kPlain15[] =
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
constexpr char kCipher15[] =
    "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
    "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";

TEST(AeadTest, SealMatchesGcmTestCases13And14) {
  // Salt 0 and sequence 0 give the all-zero IV of both test cases.
  auto sealer = Sealer::Create(MakeKey(kZeroKey, "00000000"), 1 << 20);
  ASSERT_TRUE(sealer.ok()) << sealer.status();
  auto empty = (*sealer)->Seal({}, {});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->sequence, 0u);
  EXPECT_EQ(ToHex(empty->body), "530f8afbc74536b9a963b4f1c4cb738b");  // case 13: tag only

  auto sealer14 = Sealer::Create(MakeKey(kZeroKey, "00000000"), 1 << 20);
  ASSERT_TRUE(sealer14.ok());
  const std::vector<uint8_t> zeros(16, 0);
  auto sealed = (*sealer14)->Seal({}, zeros);
  ASSERT_TRUE(sealed.ok());
  EXPECT_EQ(ToHex(sealed->body),
            "cea7403d4d606b6e074ec5d3baf39d18"    // ciphertext
            "d0d1c8a799996bf0265b98b5d48ab919");  // tag
}

TEST(AeadTest, OpenMatchesGcmTestCases15And16) {
  // IV cafebabefacedbaddecaf888 = salt cafebabe || sequence facedbaddecaf888.
  const uint64_t sequence = 0xfacedbaddecaf888ull;
  {
    auto opener = Opener::Create(MakeKey(kKey15, "cafebabe"));
    ASSERT_TRUE(opener.ok());
    const std::vector<uint8_t> body =
        Hex(std::string(kCipher15) + "b094dac5d93471bdec1a502270e3cc6c");
    auto plain = (*opener)->Open(Info(sequence, 0, body.size()), {}, body);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(ToHex(*plain), kPlain15);
  }
  {
    auto opener = Opener::Create(MakeKey(kKey15, "cafebabe"));
    ASSERT_TRUE(opener.ok());
    const std::vector<uint8_t> aad = Hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
    const std::vector<uint8_t> body =
        Hex(std::string(kCipher15).substr(0, 120) + "76fc6ece0f4e1768cddf8853bb2d551b");
    auto plain = (*opener)->Open(Info(sequence, 0, body.size()), aad, body);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(ToHex(*plain), std::string(kPlain15).substr(0, 120));
  }
}

TEST(AeadTest, RoundTripInPlaceWithIncreasingSequences) {
  const DirectionKey key = RandomKey(3, 1);
  auto sealer = Sealer::Create(key, 1ull << 30);
  auto opener = Opener::Create(key);
  ASSERT_TRUE(sealer.ok() && opener.ok());
  for (size_t size : {0, 1, 15, 16, 17, 4096, 65536 + 3}) {
    const std::vector<uint8_t> plain = RandomBytes(size, size);
    const std::vector<uint8_t> aad = RandomBytes(40, size + 1);
    std::vector<uint8_t> buffer(size + kTagSize);
    if (size > 0) std::memcpy(buffer.data(), plain.data(), size);
    auto sequence = (*sealer)->SealInPlace(aad, buffer, size);
    ASSERT_TRUE(sequence.ok()) << sequence.status();
    if (size >= 16) {
      EXPECT_NE(std::memcmp(buffer.data(), plain.data(), size), 0);
    }
    auto opened = (*opener)->OpenInPlace(Info(*sequence, 3, buffer.size()), aad, buffer);
    ASSERT_TRUE(opened.ok()) << opened.status();
    ASSERT_EQ(*opened, size);
    EXPECT_EQ(std::vector<uint8_t>(buffer.begin(), buffer.begin() + size), plain);
  }
  EXPECT_EQ((*sealer)->bytes_sealed(), 0u + 1 + 15 + 16 + 17 + 4096 + 65536 + 3);
}

TEST(AeadTest, SequencesNeverRepeatAcrossThreads) {
  const DirectionKey key = RandomKey(0, 2);
  auto sealer = Sealer::Create(key, 1ull << 30);
  ASSERT_TRUE(sealer.ok());
  std::vector<std::vector<uint64_t>> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<uint8_t> plain(100, static_cast<uint8_t>(t));
      for (int i = 0; i < 250; ++i) seen[t].push_back((*sealer)->Seal({}, plain)->sequence);
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<uint64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(*all.rbegin(), 999u);
}

class AeadRejectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    key_ = RandomKey(5, 3);
    sealer_ = *Sealer::Create(key_, 1ull << 30);
    opener_ = *Opener::Create(key_, 64);
    aad_ = RandomBytes(32, 4);
    plain_ = RandomBytes(1000, 5);
    auto sealed = sealer_->Seal(aad_, plain_);
    ASSERT_TRUE(sealed.ok());
    sealed_ = *sealed;
  }

  // Opens a copy of `body`; returns the OpenError, or nullopt on success.
  std::optional<OpenError> TryOpen(std::vector<uint8_t> body, const std::vector<uint8_t>& aad,
                                   Opener::FrameInfo info, Opener* opener = nullptr) {
    auto result = (opener ? opener : opener_.get())->OpenInPlace(info, aad, body);
    if (result.ok()) return std::nullopt;
    const std::optional<OpenError> error = GetOpenError(result.status());
    EXPECT_TRUE(error.has_value()) << result.status();
    // Nothing unauthenticated is left behind by a decryption that failed authentication.
    if (error == OpenError::kTampered && body.size() == info.sealed_size) {
      EXPECT_EQ(std::count(body.begin(), body.end(), 0), static_cast<long>(body.size()));
    }
    return error;
  }
  Opener::FrameInfo GoodInfo() const { return Info(sealed_.sequence, 5, sealed_.body.size()); }

  DirectionKey key_;
  std::unique_ptr<Sealer> sealer_;
  std::unique_ptr<Opener> opener_;
  std::vector<uint8_t> aad_, plain_;
  Sealer::Sealed sealed_;
};

TEST_F(AeadRejectTest, TamperedCiphertextTagOrAad) {
  for (size_t i : {size_t{0}, size_t{500}, size_t{999}, size_t{1000}, size_t{1015}}) {
    std::vector<uint8_t> body = sealed_.body;
    body[i] ^= 0x01;
    EXPECT_EQ(TryOpen(body, aad_, GoodInfo()), OpenError::kTampered) << "byte " << i;
  }
  std::vector<uint8_t> other_aad = aad_;
  other_aad[7] ^= 0x80;
  EXPECT_EQ(TryOpen(sealed_.body, other_aad, GoodInfo()), OpenError::kTampered);
  // Failures did not move the window: the genuine frame still opens, once.
  EXPECT_EQ(TryOpen(sealed_.body, aad_, GoodInfo()), std::nullopt);
}

TEST_F(AeadRejectTest, WrongKey) {
  auto other = *Opener::Create(RandomKey(5, 99));
  EXPECT_EQ(TryOpen(sealed_.body, aad_, GoodInfo(), other.get()), OpenError::kTampered);
  auto other_epoch = *Opener::Create(RandomKey(6, 3));
  EXPECT_EQ(TryOpen(sealed_.body, aad_, Info(sealed_.sequence, 5, sealed_.body.size()),
                    other_epoch.get()),
            OpenError::kWrongKey);
}

TEST_F(AeadRejectTest, WrongSequenceFailsAuthentication) {
  // The nonce comes from the sequence: a frame relabelled with another sequence does not open.
  EXPECT_EQ(TryOpen(sealed_.body, aad_, Info(sealed_.sequence + 1, 5, sealed_.body.size())),
            OpenError::kTampered);
}

TEST_F(AeadRejectTest, Replayed) {
  EXPECT_EQ(TryOpen(sealed_.body, aad_, GoodInfo()), std::nullopt);
  auto status = opener_->Open(GoodInfo(), aad_, sealed_.body).status();
  EXPECT_EQ(GetOpenError(status), OpenError::kReplayed);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(AeadRejectTest, OutOfWindow) {
  // Seal 100 more frames and open the newest: the first frame is now 100 > 64 behind.
  std::vector<uint8_t> last;
  uint64_t last_sequence = 0;
  for (int i = 0; i < 100; ++i) {
    auto sealed = sealer_->Seal(aad_, plain_);
    last = sealed->body;
    last_sequence = sealed->sequence;
  }
  EXPECT_EQ(TryOpen(last, aad_, Info(last_sequence, 5, last.size())), std::nullopt);
  EXPECT_EQ(TryOpen(sealed_.body, aad_, GoodInfo()), OpenError::kOutOfWindow);
}

TEST_F(AeadRejectTest, Truncated) {
  std::vector<uint8_t> body(sealed_.body.begin(), sealed_.body.end() - 1);
  EXPECT_EQ(TryOpen(body, aad_, GoodInfo()), OpenError::kTruncated);
  // Shorter than a tag, even if the header agrees.
  std::vector<uint8_t> stub(sealed_.body.begin(), sealed_.body.begin() + 10);
  EXPECT_EQ(TryOpen(stub, aad_, Info(sealed_.sequence, 5, 10)), OpenError::kTruncated);
  // Truncated with a header forged to match: authentication fails.
  EXPECT_EQ(TryOpen(body, aad_, Info(sealed_.sequence, 5, body.size())), OpenError::kTampered);
  // Extra bytes are tampering.
  std::vector<uint8_t> longer = sealed_.body;
  longer.push_back(0);
  EXPECT_EQ(TryOpen(longer, aad_, GoodInfo()), OpenError::kTampered);
}

TEST_F(AeadRejectTest, ErrorNamesAreStable) {
  EXPECT_EQ(OpenErrorName(OpenError::kTruncated), "truncated");
  EXPECT_EQ(OpenErrorName(OpenError::kWrongKey), "wrong_key");
  EXPECT_EQ(OpenErrorName(OpenError::kReplayed), "replayed");
  EXPECT_EQ(OpenErrorName(OpenError::kOutOfWindow), "out_of_window");
  EXPECT_EQ(OpenErrorName(OpenError::kTampered), "tampered");
  EXPECT_EQ(GetOpenError(absl::InternalError("x")), std::nullopt);
}

TEST(AeadTest, KeyRetiresAfterByteBudget) {
  auto sealer = *Sealer::Create(RandomKey(0, 4), 2500);
  const std::vector<uint8_t> plain(1000, 1);
  EXPECT_TRUE(sealer->Seal({}, plain).ok());
  EXPECT_TRUE(sealer->Seal({}, plain).ok());
  EXPECT_FALSE(sealer->retired());
  auto third = sealer->Seal({}, plain);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(sealer->Seal({}, std::vector<uint8_t>(500, 1)).ok());  // Exactly fills the budget.
  EXPECT_TRUE(sealer->retired());
  EXPECT_FALSE(sealer->Seal({}, {}).ok());
}

TEST(AeadTest, ShortBufferIsRefused) {
  auto sealer = *Sealer::Create(RandomKey(0, 5), 1 << 20);
  std::vector<uint8_t> buffer(100);
  EXPECT_EQ(sealer->SealInPlace({}, buffer, 90).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sealer->SealInPlace({}, buffer, 200).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sealer->SealInPlace({}, buffer, 84).ok());
}

}  // namespace
}  // namespace strait::crypto
