#include "site/nn/checkpoint.h"

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'I', 'T', 'C', 'K'};
constexpr uint32_t kVersion = 1;            // One weight version.
constexpr uint32_t kVersionTwoWeights = 2;  // Adds the weight-array count, previous (+ lookahead).
constexpr uint32_t kVersionClipScale = 3;   // Version 2 and the lagged clipping scale.
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 4 + 4 + 8 + 8 + 8 + 8;
constexpr size_t kHeaderBytesV2 = kHeaderBytes + 4;
constexpr size_t kHeaderBytesV3 = kHeaderBytesV2 + 4;

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 are little-endian
  out.append(bytes, sizeof(T));
}

// Reads fixed-size fields from a byte string; the caller checked the length.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  template <typename T>
  T Get() {
    T value;
    std::memcpy(&value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  void Floats(std::vector<float>* out, uint64_t n) {
    out->resize(n);
    if (n == 0) return;  // memcpy to an empty vector's null data() is undefined
    std::memcpy(out->data(), data_.data() + pos_, sizeof(float) * n);
    pos_ += sizeof(float) * n;
  }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

}  // namespace

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointState& s) {
  const bool two = s.weight_versions == 2;
  if ((s.weight_versions != 1 && !two) ||
      s.previous_params.size() != (two ? s.params.size() : size_t{0}) ||
      (!s.lookahead_params.empty() && (!two || s.lookahead_params.size() != s.params.size())) ||
      (s.lagged_clip_scale.has_value() && !two)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint of ", s.weight_versions, " weight versions with ", s.params.size(), " params, ",
        s.previous_params.size(), " previous and ", s.lookahead_params.size(), " lookahead params",
        s.lagged_clip_scale.has_value() ? " and a lagged clip scale" : ""));
  }
  const uint32_t arrays = two ? (s.lookahead_params.empty() ? 2 : 3) : 1;
  std::string data;
  data.reserve(kHeaderBytesV3 + 4 * (arrays * s.params.size() + s.optimizer_state.size()) + 4);
  data.append(kMagic, sizeof(kMagic));
  Put<uint32_t>(data, s.lagged_clip_scale.has_value() ? kVersionClipScale
                      : two                           ? kVersionTwoWeights
                                                      : kVersion);
  Put<uint32_t>(data, s.optimizer_kind);
  Put<int64_t>(data, s.step);
  Put<uint64_t>(data, s.fingerprint);
  Put<int32_t>(data, s.first_layer);
  Put<int32_t>(data, s.end_layer);
  Put<uint64_t>(data, s.init_seed);
  Put<uint64_t>(data, s.data_seed);
  Put<uint64_t>(data, s.params.size());
  Put<uint64_t>(data, s.optimizer_state.size());
  if (two) Put<uint32_t>(data, arrays);
  if (s.lagged_clip_scale.has_value()) Put<float>(data, *s.lagged_clip_scale);
  for (const std::vector<float>* w : {&s.params, &s.previous_params, &s.lookahead_params}) {
    data.append(reinterpret_cast<const char*>(w->data()), 4 * w->size());
  }
  data.append(reinterpret_cast<const char*>(s.optimizer_state.data()),
              4 * s.optimizer_state.size());
  Put<uint32_t>(data, Crc32c(data.data(), data.size()));
  return data;
}

absl::Status WriteCheckpoint(const std::string& path, const CheckpointState& s, Env* env) {
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(s);
  if (!bytes.ok()) return bytes.status();
  return env->WriteFileAtomically(path, *bytes);
}

absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path, Env* env) {
  absl::StatusOr<std::string> data = env->ReadFile(path);
  if (!data.ok()) {
    return absl::Status(data.status().code(), absl::StrCat("cannot read checkpoint ", path, ": ",
                                                           data.status().message()));
  }
  absl::StatusOr<CheckpointState> state = ParseCheckpoint(*data);
  if (!state.ok()) {
    return absl::Status(state.status().code(),
                        absl::StrCat("checkpoint ", path, ": ", state.status().message()));
  }
  return state;
}

absl::StatusOr<CheckpointState> ParseCheckpoint(const std::string& data) {
  auto bad = [](const std::string& why) { return absl::DataLossError(why); };
  if (data.size() < kHeaderBytes + 4) return bad("truncated (shorter than its header)");
  if (std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) return bad("not a Strait checkpoint");
  Reader r(data);
  r.Get<uint64_t>();  // magic
  const uint32_t version = r.Get<uint32_t>();
  if (version != kVersion && version != kVersionTwoWeights && version != kVersionClipScale) {
    return bad(absl::StrCat("format version ", version, " is not supported by this build (expects ",
                            kVersion, " to ", kVersionClipScale, ")"));
  }
  const size_t header = version == kVersion             ? kHeaderBytes
                        : version == kVersionTwoWeights ? kHeaderBytesV2
                                                        : kHeaderBytesV3;
  if (data.size() < header + 4) return bad("truncated (shorter than its header)");
  CheckpointState s;
  s.optimizer_kind = r.Get<uint32_t>();
  s.step = r.Get<int64_t>();
  s.fingerprint = r.Get<uint64_t>();
  s.first_layer = r.Get<int32_t>();
  s.end_layer = r.Get<int32_t>();
  s.init_seed = r.Get<uint64_t>();
  s.data_seed = r.Get<uint64_t>();
  const uint64_t params = r.Get<uint64_t>(), state = r.Get<uint64_t>();
  uint64_t versions = 1;  // weight arrays
  if (version != kVersion) {
    versions = r.Get<uint32_t>();
    if (versions != 2 && versions != 3) {
      return bad(
          absl::StrCat("format version ", version, " with ", versions, " weight arrays (2 or 3)"));
    }
    s.weight_versions = 2;
  }
  if (version == kVersionClipScale) s.lagged_clip_scale = r.Get<float>();
  const uint64_t payload = (data.size() - header - 4) / 4;
  if (params > payload / versions || state > payload - versions * params ||
      header + 4 * (versions * params + state) + 4 != data.size()) {
    return bad(absl::StrCat("truncated or padded: ", data.size(), " bytes do not hold ", versions,
                            " x ", params, " parameters and ", state, " optimizer floats"));
  }
  uint32_t stored;
  std::memcpy(&stored, data.data() + data.size() - 4, 4);
  if (Crc32c(data.data(), data.size() - 4) != stored) return bad("checksum mismatch (corrupt)");
  r.Floats(&s.params, params);
  if (versions >= 2) r.Floats(&s.previous_params, params);
  if (versions == 3) r.Floats(&s.lookahead_params, params);
  r.Floats(&s.optimizer_state, state);
  return s;
}

}  // namespace strait::site
