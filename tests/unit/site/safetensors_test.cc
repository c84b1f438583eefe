// safetensors (site/nn/safetensors.h): a file round-trips bit for bit in F32 and to bf16 in BF16;
// its bytes are the format's (header length, JSON, aligned data); and a truncated or corrupted
// file, or a header that lies about its offsets, is refused with what is wrong.
#include "site/nn/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "compression/float_bits.h"

namespace strait::site {
namespace {

std::vector<NamedTensor> Tensors() {
  return {{"wte.weight", {2, 3}, {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-30f}},
          {"h.0.ln_1.bias", {3}, {0.5f, 0.25f, -0.125f}}};
}

TEST(SafetensorsTest, F32RoundTripsBitForBit) {
  const std::string file = EncodeSafetensors(Tensors(), SafetensorsDtype::kF32, {{"format", "pt"}});
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);  // Little endian on every machine this builds for.
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(file.size(), 8 + n + 9 * 4);
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(file, file.size());
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->metadata.at("format"), "pt");
  EXPECT_EQ(header->tensors.at("wte.weight").dtype, "F32");
  absl::StatusOr<std::vector<NamedTensor>> read = DecodeSafetensors(file);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  for (const NamedTensor& want : Tensors()) {
    const auto got = std::find_if(read->begin(), read->end(),
                                  [&](const NamedTensor& t) { return t.name == want.name; });
    ASSERT_NE(got, read->end()) << want.name;
    EXPECT_EQ(got->shape, want.shape);
    ASSERT_EQ(got->values.size(), want.values.size());
    EXPECT_EQ(0, std::memcmp(got->values.data(), want.values.data(), 4 * want.values.size()));
  }
}

TEST(SafetensorsTest, Bf16RoundsEachValueToNearestEven) {
  absl::StatusOr<std::vector<NamedTensor>> read =
      DecodeSafetensors(EncodeSafetensors(Tensors(), SafetensorsDtype::kBF16));
  ASSERT_TRUE(read.ok()) << read.status();
  for (const NamedTensor& t : *read) {
    for (size_t i = 0; i < t.values.size(); ++i) {
      const float want = t.name == "wte.weight" ? Tensors()[0].values[i] : Tensors()[1].values[i];
      EXPECT_EQ(t.values[i], compression::Bf16BitsToFloat(compression::FloatToBf16Bits(want)));
    }
  }
}

TEST(SafetensorsTest, ABrokenFileIsRefusedWithWhatIsWrong) {
  const std::string file = EncodeSafetensors(Tensors(), SafetensorsDtype::kF32);
  auto refusal = [](const std::string& bytes) {
    absl::StatusOr<std::vector<NamedTensor>> read = DecodeSafetensors(bytes);
    EXPECT_FALSE(read.ok());
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
    return std::string(read.status().message());
  };
  EXPECT_NE(refusal(file.substr(0, file.size() - 4)).find("truncated"), std::string::npos);
  EXPECT_NE(refusal(file.substr(0, 5)).find("8-byte"), std::string::npos);
  std::string longer = file + "xxxx";
  EXPECT_NE(refusal(longer).find("take 36 bytes of a data section of 40"), std::string::npos);
  std::string lying = file;  // Header length past the end of the file.
  lying[7] = 0x7f;
  EXPECT_NE(refusal(lying).find("header of"), std::string::npos);
  // Offsets that overlap: the second tensor claims the first one's bytes.
  std::string overlap = file;
  const size_t at = overlap.find("[24,36]");
  ASSERT_NE(at, std::string::npos) << overlap.substr(8, 200);
  overlap.replace(at, 7, "[12,24]");
  EXPECT_NE(refusal(overlap).find("overlap"), std::string::npos);
  std::string garbled = file;
  garbled[9] = '!';
  EXPECT_NE(refusal(garbled).find("no JSON object"), std::string::npos);
}

}  // namespace
}  // namespace strait::site
