#include "site/exchange/teacher_targets_codec.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/float_bits.h"

namespace strait::site {
namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 10;
constexpr double kStepsPerNat = 16;

void Put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t Get(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
  return v;
}

int IndexBytes(int classes) { return classes <= 65536 ? 2 : 4; }

float Half(float v) { return compression::HalfBitsToFloat(compression::FloatToHalfBits(v)); }

// Scales a row back to a total of 1 when rounding took it past.
void Renormalize(float* p, int k) {
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i];
  if (sum <= 1) return;
  for (int i = 0; i < k; ++i) p[i] = static_cast<float>(p[i] / sum);
}

}  // namespace

uint64_t TeacherTargetsBytes(int64_t rows, int k, TeacherValues values, int classes) {
  const uint64_t values_bytes = values == TeacherValues::kInt8 ? 2 + k : 2 * uint64_t(k);
  return kHeaderBytes + rows * (uint64_t(k) * IndexBytes(classes) + values_bytes);
}

std::string EncodeTeacherTargets(const TeacherTargets& t, TeacherValues values, int classes) {
  const int index_bytes = IndexBytes(classes);
  const bool int8 = values == TeacherValues::kInt8;
  std::string out;
  out.reserve(TeacherTargetsBytes(t.rows, t.k, values, classes));
  Put(out, kVersion, 1);
  Put(out, int8 ? 1 : 0, 1);
  Put(out, index_bytes, 1);
  Put(out, 0, 1);
  Put(out, static_cast<uint64_t>(t.rows), 4);
  Put(out, static_cast<uint64_t>(t.k), 2);
  for (int64_t r = 0; r < t.rows; ++r) {
    const int32_t* index = &t.indices[r * t.k];
    const float* p = &t.probabilities[r * t.k];
    for (int i = 0; i < t.k; ++i) Put(out, static_cast<uint32_t>(index[i]), index_bytes);
    if (!int8) {
      for (int i = 0; i < t.k; ++i) Put(out, compression::FloatToHalfBits(p[i]), 2);
      continue;
    }
    const float top = *std::max_element(p, p + t.k);
    const float log_top = Half(static_cast<float>(std::log(std::max(top, 1e-30f))));
    Put(out, compression::FloatToHalfBits(log_top), 2);
    for (int i = 0; i < t.k; ++i) {
      const double below = log_top - std::log(std::max(p[i], 1e-30f));
      Put(out, static_cast<uint64_t>(std::clamp(std::round(below * kStepsPerNat), 0.0, 255.0)), 1);
    }
  }
  return out;
}

absl::StatusOr<TeacherTargets> DecodeTeacherTargets(std::string_view in, int64_t rows,
                                                    int classes) {
  auto error = [](auto&&... parts) {
    return absl::DataLossError(absl::StrCat("teacher targets: ", parts...));
  };
  if (in.size() < kHeaderBytes) return error(in.size(), " bytes, shorter than the header");
  if (Get(in, 0, 1) != kVersion) return error("version ", Get(in, 0, 1), ", expected 1");
  const uint64_t kind = Get(in, 1, 1);
  if (kind > 1) return error("value kind ", kind, ", expected 0 (fp16) or 1 (int8)");
  const int index_bytes = static_cast<int>(Get(in, 2, 1));
  if (index_bytes != IndexBytes(classes) || Get(in, 3, 1) != 0) {
    return error("indices of ", index_bytes, " bytes for ", classes, " classes");
  }
  TeacherTargets t;
  t.rows = static_cast<int64_t>(Get(in, 4, 4));
  t.k = static_cast<int>(Get(in, 8, 2));
  if (t.rows != rows) return error(t.rows, " rows, expected ", rows);
  if (t.k < 1 || t.k > classes) return error("top ", t.k, " of ", classes, " classes");
  const bool int8 = kind == 1;
  const size_t row_bytes = size_t(t.k) * index_bytes + (int8 ? 2 + t.k : 2 * size_t(t.k));
  if (in.size() != kHeaderBytes + row_bytes * static_cast<size_t>(rows)) {
    return error(in.size(), " bytes, expected ", kHeaderBytes + row_bytes * rows, " for ", rows,
                 " rows of top ", t.k);
  }
  t.indices.resize(rows * t.k);
  t.probabilities.resize(rows * t.k);
  std::vector<int64_t> seen_in_row(classes, -1);
  size_t at = kHeaderBytes;
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* index = &t.indices[r * t.k];
    float* p = &t.probabilities[r * t.k];
    for (int i = 0; i < t.k; ++i, at += index_bytes) {
      const uint64_t v = Get(in, at, index_bytes);
      if (v >= static_cast<uint64_t>(classes) || seen_in_row[v] == r) {
        return error("row ", r, ": index ", v, v < uint64_t(classes) ? " repeated" : "", " (",
                     classes, " classes)");
      }
      seen_in_row[v] = r;
      index[i] = static_cast<int32_t>(v);
    }
    if (!int8) {
      for (int i = 0; i < t.k; ++i, at += 2) {
        p[i] = compression::HalfBitsToFloat(static_cast<uint16_t>(Get(in, at, 2)));
        if (!(p[i] >= 0 && p[i] <= 1)) return error("row ", r, ": probability ", p[i]);
      }
    } else {
      const float log_top = compression::HalfBitsToFloat(static_cast<uint16_t>(Get(in, at, 2)));
      at += 2;
      if (!(log_top <= 0 && log_top > -80)) return error("row ", r, ": log-probability ", log_top);
      for (int i = 0; i < t.k; ++i, at += 1) {
        p[i] = static_cast<float>(std::exp(log_top - Get(in, at, 1) / kStepsPerNat));
      }
    }
    Renormalize(p, t.k);
  }
  return t;
}

absl::StatusOr<TeacherTargets> AsReceived(const TeacherTargets& targets, TeacherValues values,
                                          int classes) {
  return DecodeTeacherTargets(EncodeTeacherTargets(targets, values, classes), targets.rows,
                              classes);
}

}  // namespace strait::site
