// A teacher's targets arrive from another site through a gateway the student does not trust:
// whatever the bytes, decoding returns an error or targets of the expected rows whose indices are
// in range and distinct per row and whose probabilities sum to at most 1, never a crash.
// Input: u8 classes selector | the encoded targets.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "site/exchange/teacher_targets_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int classes = data[0] < 128 ? 2 + data[0] : 65536 + data[0];
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  // The rows the header claims, so that the fuzzer gets past that check.
  int64_t rows = 0;
  for (int i = 0; i < 4 && 4 + i < static_cast<int>(bytes.size()); ++i) {
    rows |= int64_t{static_cast<uint8_t>(bytes[4 + i])} << (8 * i);
  }
  absl::StatusOr<strait::site::TeacherTargets> t =
      strait::site::DecodeTeacherTargets(bytes, rows, classes);
  if (!t.ok()) return 0;
  for (int64_t r = 0; r < t->rows; ++r) {
    double sum = 0;
    for (int i = 0; i < t->k; ++i) {
      const int32_t index = t->indices[r * t->k + i];
      if (index < 0 || index >= classes) std::abort();
      sum += t->probabilities[r * t->k + i];
    }
    if (!(sum <= 1.0 + 1e-5)) std::abort();
  }
  return 0;
}
