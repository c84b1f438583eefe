// topk:R[:ef]. Payload: u64 k; the k kept values as bf16 in two byte planes (high bytes, then low
// bytes, which zstd compresses better); then the k indices, ascending, as varints of the gap to the
// previous index minus one. Ties at the threshold magnitude go to the lowest indices.
#include "compression/topk_stage.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec_stage.h"
#include "compression/float_bits.h"

namespace strait::compression {
namespace {

constexpr size_t kMaxVarintBytes = 10;

size_t PutVarint(uint64_t v, uint8_t* out) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<uint8_t>(v) | 0x80;
    v >>= 7;
  }
  out[n++] = static_cast<uint8_t>(v);
  return n;
}

// Reads a varint at *pos (< end); false when truncated or longer than 64 bits.
bool GetVarint(const uint8_t* data, size_t end, size_t* pos, uint64_t* value) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && *pos < end; shift += 7) {
    uint8_t byte = data[(*pos)++];
    if (shift == 63 && byte > 1) return false;
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (byte < 0x80) {
      *value = v;
      return true;
    }
  }
  return false;
}

class TopKStage final : public CodecStage {
 public:
  explicit TopKStage(const StageSpec& spec)
      : fraction_(spec.fraction), error_feedback_(spec.error_feedback) {}

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                      ByteBuffer* out) override {
    const uint64_t n = context.element_count;
    const float* x = reinterpret_cast<const float*>(in.data());
    if (error_feedback_) {
      if (context.residual.size() != n) {
        return absl::FailedPreconditionError("topk:ef needs a residual of the tensor's size");
      }
      float* r = context.residual.data();
      for (uint64_t i = 0; i < n; ++i) r[i] += x[i];  // r := x + r, the tensor to send
      x = r;
    }
    const uint64_t k = TopKCount(n, fraction_);
    size_t base = out->size();
    out->Resize(base + 8 + k * (2 + kMaxVarintBytes));
    uint8_t* p = out->data() + base;
    std::memcpy(p, &k, 8);
    size_t used = 8 + 2 * k;
    if (k > 0) {
      uint32_t threshold = 0;
      uint64_t ties = 0;
      FindThreshold(x, n, k, &threshold, &ties);
      uint8_t* hi = p + 8;
      uint8_t* lo = hi + k;
      uint64_t j = 0, previous = 0;
      float* residual = error_feedback_ ? context.residual.data() : nullptr;
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t bits = FloatBits(x[i]);
        uint32_t key = MagnitudeKey(bits);
        bool finite = key < 0x7f800000u;
        bool take = key > threshold || (key == threshold && ties > 0);
        if (take) {
          if (key == threshold) --ties;
          uint16_t b = FloatToBf16Bits(x[i]);
          hi[j] = static_cast<uint8_t>(b >> 8);
          lo[j] = static_cast<uint8_t>(b);
          used += PutVarint(j == 0 ? i : i - previous - 1, p + used);
          previous = i;
          ++j;
          if (residual) residual[i] = finite ? x[i] - Bf16BitsToFloat(b) : 0.0f;
        } else if (residual && !finite) {
          residual[i] = 0.0f;  // a non-finite value must not poison every later step
        }
      }
    }
    out->Resize(base + used);
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    // At least the count; at most every value kept with the longest varints.
    uint64_t n = decoded_size / 4;
    if (encoded_size < 8 || encoded_size > 8 + n * (2 + kMaxVarintBytes)) {
      return absl::InvalidArgumentError(absl::StrCat("codec stage 'topk': ", encoded_size,
                                                     " bytes cannot encode ", n, " values"));
    }
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    const uint64_t n = out.size() / 4;
    uint64_t k;
    std::memcpy(&k, in.data(), 8);
    // k follows from n and R; each kept value takes 2 bytes plus at least one varint byte.
    if (k != TopKCount(n, fraction_) || k > (in.size() - 8) / 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec stage 'topk': count ", k, " is not R * ", n, " or does not fit"));
    }
    float* y = reinterpret_cast<float*>(out.data());
    std::fill(y, y + n, 0.0f);
    const uint8_t* hi = in.data() + 8;
    const uint8_t* lo = hi + k;
    size_t pos = 8 + 2 * k;
    uint64_t next = 0;  // smallest index the next entry may have
    for (uint64_t j = 0; j < k; ++j) {
      uint64_t gap;
      if (!GetVarint(in.data(), in.size(), &pos, &gap) || gap >= n - next) {
        return absl::InvalidArgumentError(
            absl::StrCat("codec stage 'topk': index ", j, " is malformed or out of range"));
      }
      uint64_t index = next + gap;
      y[index] = Bf16BitsToFloat(static_cast<uint16_t>((hi[j] << 8) | lo[j]));
      next = index + 1;
    }
    if (pos != in.size()) {
      return absl::InvalidArgumentError("codec stage 'topk': trailing bytes after the indices");
    }
    return absl::OkStatus();
  }

 private:
  // Radix select over the 31 magnitude bits, 11 + 10 + 10 bits at a time: each pass counts the
  // next digit of the keys that share the digits found so far, and keeps the digit where the k-th
  // largest key falls. No allocation, three passes. *ties: how many keys equal to the threshold
  // are kept (the lowest indices).
  void FindThreshold(const float* x, uint64_t n, uint64_t k, uint32_t* threshold, uint64_t* ties) {
    uint64_t need = k;
    uint32_t prefix = 0;
    int prefix_bits = 0;
    for (int digit_bits : {11, 10, 10}) {
      const int shift = 31 - prefix_bits - digit_bits;
      const uint32_t digits = 1u << digit_bits;
      std::fill(histogram_.begin(), histogram_.begin() + digits, 0);
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t key = MagnitudeKey(FloatBits(x[i]));
        if ((key >> (shift + digit_bits)) == prefix) ++histogram_[(key >> shift) & (digits - 1)];
      }
      uint32_t digit = digits - 1;
      while (histogram_[digit] < need) need -= histogram_[digit--];  // the k-th key's digit
      prefix = (prefix << digit_bits) | digit;
      prefix_bits += digit_bits;
    }
    *threshold = prefix;
    *ties = need;
  }

  const double fraction_;
  const bool error_feedback_;
  std::array<uint64_t, 2048> histogram_;
};

}  // namespace

uint64_t TopKCount(uint64_t n, double fraction) {
  if (n == 0) return 0;
  double k = std::round(fraction * static_cast<double>(n));
  return std::clamp<uint64_t>(k < 1 ? 1 : static_cast<uint64_t>(k), 1, n);
}

std::unique_ptr<CodecStage> MakeTopKStage(const StageSpec& spec) {
  return std::make_unique<TopKStage>(spec);
}

}  // namespace strait::compression
