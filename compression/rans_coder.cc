#include "compression/rans_coder.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::compression {
namespace {

constexpr uint32_t kScaleBits = 12, kScale = 1u << kScaleBits;
constexpr uint32_t kLow = 1u << 23;  // The state stays in [kLow, 256 * kLow) between symbols.
constexpr uint32_t kTokens = 70;     // u < 2^31: its leading one is at position 30 at most.

uint32_t ZigZag(int32_t q) {
  return (static_cast<uint32_t>(q) << 1) ^ static_cast<uint32_t>(q >> 31);
}
int32_t UnZigZag(uint32_t u) { return static_cast<int32_t>((u >> 1) ^ (0u - (u & 1))); }

struct Token {
  uint32_t token, raw_bits, raw;
};
Token Tokenize(uint32_t u) {
  if (u < 16) return {u, 0, 0};
  const uint32_t lead = std::bit_width(u) - 1;  // >= 4
  return {16 + 2 * (lead - 4) + ((u >> (lead - 1)) & 1), lead - 1, u & ((1u << (lead - 1)) - 1)};
}

// The half-octave of a column's mean magnitude: its group.
uint8_t GroupOf(uint64_t magnitude_sum, size_t rows) {
  if (magnitude_sum == 0) return 0;
  const double mean = static_cast<double>(magnitude_sum) / static_cast<double>(rows);
  const double group = std::floor(2 * std::log2(mean)) + 14;
  return static_cast<uint8_t>(std::clamp(group, 0.0, kGroups - 1.0));
}

// table[c]: the dense index of column c's group among the groups used, in increasing order; the
// number of groups used.
size_t IndexGroups(const std::vector<uint8_t>& group, std::vector<uint32_t>* table) {
  uint32_t index[kGroups] = {};
  bool used[kGroups] = {};
  for (uint8_t g : group) used[g] = true;
  size_t tables = 0;
  for (uint32_t g = 0; g < kGroups; ++g) {
    if (used[g]) index[g] = static_cast<uint32_t>(tables++);
  }
  table->resize(group.size());
  for (size_t c = 0; c < group.size(); ++c) (*table)[c] = index[group[c]];
  return tables;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed klt symbols: ", what));
}

void Append(ByteBuffer* out, const void* bytes, size_t n) {
  const size_t at = out->size();
  out->Resize(at + n);
  if (n > 0) std::memcpy(out->data() + at, bytes, n);
}
void Append32(ByteBuffer* out, uint32_t v) { Append(out, &v, 4); }

// Frequencies summing to kScale (total > 0), at least 1 for every token from the one below the
// smallest that occurs to the one above the largest: a later stream may reuse the table (and its
// tokens spread about as far).
void Normalize(const uint32_t* counts, uint64_t total, uint16_t* freq) {
  uint32_t first = 0, last = kTokens - 1;
  while (counts[first] == 0) ++first;
  while (counts[last] == 0) --last;
  first = first > 0 ? first - 1 : 0;
  last = std::min(last + 1, kTokens - 1);
  int64_t sum = 0;
  uint32_t largest = 0;
  for (uint32_t t = 0; t < kTokens; ++t) {
    freq[t] =
        t < first || t > last ? 0 : std::max<uint64_t>(1, uint64_t{counts[t]} * kScale / total);
    sum += freq[t];
    if (freq[t] > freq[largest]) largest = t;
  }
  int64_t missing = kScale - sum;
  if (missing >= 0) {
    freq[largest] += missing;
    return;
  }
  while (missing < 0) {  // Tokens raised to 1 took too much: take it back from the largest.
    uint16_t* top = std::max_element(freq, freq + kTokens);
    const int64_t take = std::min<int64_t>(-missing, *top - 1);
    *top -= take;
    missing += take;
  }
}

// The bits a rANS stream spends on `counts` (per table and token) with frequencies `freq`;
// infinite when a token that occurs has none.
double CodedBits(const std::vector<uint32_t>& counts, const std::vector<uint16_t>& freq) {
  double bits = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    if (freq[i] == 0) return HUGE_VAL;
    bits += counts[i] * (kScaleBits - std::log2(static_cast<double>(freq[i])));
  }
  return bits;
}

// Reads LSB-first bit fields from a byte span; false when it runs out.
class BitReader {
 public:
  explicit BitReader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  bool Read(uint32_t bits, uint32_t* value) {
    while (filled_ < bits) {
      if (next_ == bytes_.size()) return false;
      buffer_ |= uint64_t{bytes_[next_++]} << filled_;
      filled_ += 8;
    }
    *value = static_cast<uint32_t>(buffer_ & ((uint64_t{1} << bits) - 1));
    buffer_ >>= bits;
    filled_ -= bits;
    return true;
  }
  // Every byte read and the padding bits zero.
  bool Done() const { return next_ == bytes_.size() && buffer_ == 0; }

 private:
  absl::Span<const uint8_t> bytes_;
  size_t next_ = 0;
  uint64_t buffer_ = 0;
  uint32_t filled_ = 0;
};

}  // namespace

uint64_t MaxCodedSize(uint64_t count, uint64_t width) {
  if (count == 0) return 0;
  // Groups and tables; raw bits (29 a symbol at most); two state bytes a symbol at most (12 bits);
  // sizes.
  return width + kGroups * (2 + 2 * kTokens) + count * 4 + count * 2 + 16;
}

bool RansCoder::Encode(absl::Span<const int32_t> symbols, size_t width, ByteBuffer* out, size_t at,
                       bool may_reuse) {
  out->Resize(at);
  const size_t n = symbols.size();
  if (n == 0) return false;
  const size_t rows = n / width;
  magnitude_.assign(width, 0);
  for (size_t i = 0; i < n; ++i) magnitude_[i % width] += std::abs(int64_t{symbols[i]});
  fresh_.width = width;
  fresh_.group.resize(width);
  for (size_t c = 0; c < width; ++c) fresh_.group[c] = GroupOf(magnitude_[c], rows);
  fresh_.count = IndexGroups(fresh_.group, &fresh_.table);
  const bool can_reuse = may_reuse && kept_.count > 0 && kept_.width == width;
  tokens_.resize(n);
  counts_.assign(fresh_.count * kTokens, 0);
  kept_counts_.assign(can_reuse ? kept_.count * kTokens : 0, 0);
  renormalised_.clear();  // Holds the raw bits first.
  uint64_t buffer = 0;
  uint32_t filled = 0;
  for (size_t i = 0; i < n; ++i) {
    const Token t = Tokenize(ZigZag(symbols[i]));
    tokens_[i] = static_cast<uint8_t>(t.token);
    ++counts_[fresh_.table[i % width] * kTokens + t.token];
    if (can_reuse) ++kept_counts_[kept_.table[i % width] * kTokens + t.token];
    buffer |= uint64_t{t.raw} << filled;
    filled += t.raw_bits;
    for (; filled >= 8; filled -= 8, buffer >>= 8) renormalised_.push_back(buffer & 0xff);
  }
  if (filled > 0) renormalised_.push_back(buffer & 0xff);

  written_tables_.assign(fresh_.group.begin(), fresh_.group.end());
  fresh_.freq.resize(fresh_.count * kTokens);
  fresh_.cumulative.resize(fresh_.count * kTokens);
  for (size_t b = 0; b < fresh_.count; ++b) {
    const uint32_t* counts = &counts_[b * kTokens];
    uint16_t* freq = &fresh_.freq[b * kTokens];
    Normalize(counts, std::accumulate(counts, counts + kTokens, uint64_t{0}), freq);
    uint32_t first = 0, last = kTokens - 1, sum = 0;
    while (freq[first] == 0) ++first;
    while (freq[last] == 0) --last;
    written_tables_.push_back(static_cast<uint8_t>(first));
    written_tables_.push_back(static_cast<uint8_t>(last - first + 1));
    for (uint32_t t = 0; t < kTokens; ++t) {
      fresh_.cumulative[b * kTokens + t] = static_cast<uint16_t>(sum);
      sum += freq[t];
      if (t < first || t > last) continue;
      written_tables_.push_back(
          static_cast<uint8_t>((freq[t] & 0x7f) | (freq[t] >= 0x80 ? 0x80 : 0)));
      if (freq[t] >= 0x80) written_tables_.push_back(static_cast<uint8_t>(freq[t] >> 7));
    }
  }
  const bool reuse =
      can_reuse && CodedBits(kept_counts_, kept_.freq) <
                       CodedBits(counts_, fresh_.freq) + 8.0 * written_tables_.size();
  const Tables& tables = reuse ? kept_ : fresh_;
  if (!reuse) Append(out, written_tables_.data(), written_tables_.size());
  Append32(out, static_cast<uint32_t>(renormalised_.size()));
  Append(out, renormalised_.data(), renormalised_.size());

  renormalised_.clear();
  uint32_t x = kLow;
  for (size_t i = n; i-- > 0;) {
    const size_t entry = tables.table[i % width] * kTokens + tokens_[i];
    const uint32_t f = tables.freq[entry];
    const uint32_t x_max = ((kLow >> kScaleBits) << 8) * f;
    for (; x >= x_max; x >>= 8) renormalised_.push_back(x & 0xff);
    x = ((x / f) << kScaleBits) + (x % f) + tables.cumulative[entry];
  }
  Append32(out, x);
  std::reverse(renormalised_.begin(), renormalised_.end());
  Append(out, renormalised_.data(), renormalised_.size());
  if (!reuse) std::swap(kept_, fresh_);
  return reuse;
}

absl::Status RansCoder::Decode(absl::Span<const uint8_t> in, size_t width, absl::Span<int32_t> out,
                               bool reused) {
  const size_t n = out.size();
  if (n == 0) return in.empty() ? absl::OkStatus() : Malformed("bytes for no symbols");
  if (width == 0 || n % width != 0) return Malformed("symbols are not whole rows");
  size_t pos = 0;
  auto need = [&](size_t bytes) { return in.size() - pos >= bytes; };
  if (reused && (kept_.count == 0 || kept_.width != width)) {
    return Malformed("a stream coded with tables this decoder does not hold");
  }
  if (!reused) STRAIT_RETURN_IF_ERROR(ReadTables(in, width, &pos));
  const Tables& tables = reused ? kept_ : fresh_;
  if (!need(4)) return Malformed("raw bits' size truncated");
  uint32_t raw_size;
  std::memcpy(&raw_size, &in[pos], 4);
  pos += 4;
  if (!need(raw_size)) return Malformed("raw bits truncated");
  BitReader raw(in.subspan(pos, raw_size));
  pos += raw_size;
  if (!need(4)) return Malformed("rANS state truncated");
  uint32_t x;
  std::memcpy(&x, &in[pos], 4);
  pos += 4;
  if (x < kLow || x >= (kLow << 8)) return Malformed("rANS state out of range");
  for (size_t i = 0; i < n; ++i) {
    const size_t table = tables.table[i % width];
    const uint32_t slot = x & (kScale - 1);
    const uint32_t t = tables.slot_token[table * kScale + slot];
    const size_t entry = table * kTokens + t;
    x = tables.freq[entry] * (x >> kScaleBits) + slot - tables.cumulative[entry];
    while (x < kLow) {
      if (!need(1)) return Malformed("rANS stream ends early");
      x = (x << 8) | in[pos++];
    }
    uint32_t u = t;
    if (t >= 16) {
      const uint32_t lead = 4 + (t - 16) / 2;
      uint32_t low;
      if (!raw.Read(lead - 1, &low)) return Malformed("raw bits end early");
      u = (1u << lead) | (((t - 16) & 1) << (lead - 1)) | low;
    }
    out[i] = UnZigZag(u);
  }
  if (pos != in.size() || x != kLow || !raw.Done()) {
    return Malformed("the stream does not end where its symbols do");
  }
  if (!reused) std::swap(kept_, fresh_);
  return absl::OkStatus();
}

absl::Status RansCoder::ReadTables(absl::Span<const uint8_t> in, size_t width, size_t* at) {
  size_t pos = *at;
  auto need = [&](size_t bytes) { return in.size() - pos >= bytes; };
  if (!need(width)) return Malformed("column groups truncated");
  Tables& tables = fresh_;
  tables.width = width;
  tables.group.assign(in.begin(), in.begin() + width);
  pos += width;
  for (uint8_t g : tables.group) {
    if (g >= kGroups)
      return Malformed(absl::StrCat("column group ", int{g}, " above ", kGroups - 1));
  }
  tables.count = IndexGroups(tables.group, &tables.table);
  tables.freq.assign(tables.count * kTokens, 0);
  tables.cumulative.resize(tables.count * kTokens);
  tables.slot_token.resize(tables.count * kScale);
  for (size_t b = 0; b < tables.count; ++b) {
    if (!need(2)) return Malformed(absl::StrCat("table ", b, " truncated"));
    const uint32_t first = in[pos], count = in[pos + 1];
    pos += 2;
    if (count == 0 || first + count > kTokens) {
      return Malformed(absl::StrCat("table ", b, " has tokens [", first, ", ", first + count,
                                    ") outside [0, ", kTokens, ")"));
    }
    uint16_t* freq = &tables.freq[b * kTokens];
    uint32_t sum = 0;
    for (uint32_t t = first; t < first + count; ++t) {
      if (!need(1)) return Malformed(absl::StrCat("table ", b, " truncated"));
      uint32_t f = in[pos] & 0x7f;
      if (in[pos++] & 0x80) {
        if (!need(1) || in[pos] & 0x80) return Malformed("bad frequency");
        f |= uint32_t{in[pos++]} << 7;
      }
      if (f > kScale - sum) return Malformed(absl::StrCat("table ", b, " frequencies exceed 4096"));
      tables.cumulative[b * kTokens + t] = static_cast<uint16_t>(sum);
      std::fill_n(&tables.slot_token[b * kScale + sum], f, static_cast<uint8_t>(t));
      freq[t] = static_cast<uint16_t>(f);
      sum += f;
    }
    if (sum != kScale) return Malformed(absl::StrCat("table ", b, " frequencies sum to ", sum));
  }
  *at = pos;
  return absl::OkStatus();
}

}  // namespace strait::compression
