// What a teacher tells the student about one microbatch (knowledge sharing, docs/distillation.md):
// for every target (row of logits), the k vocabulary entries of highest tempered probability and
// those probabilities, largest first. The rest of the vocabulary is one bucket of mass 1 - sum
// (site/nn/distillation_loss.h). Thread-compatible values and pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "site/nn/distillation_loss.h"

namespace strait::site {

struct TeacherTargets {
  int64_t rows = 0;
  int k = 0;
  std::vector<int32_t> indices;      // [rows, k]
  std::vector<float> probabilities;  // [rows, k], each row's largest first, summing to <= 1.
  // Row r as the distillation loss takes it.
  TeacherTopK Row(int64_t r) const {
    return {absl::MakeConstSpan(indices).subspan(r * k, k),
            absl::MakeConstSpan(probabilities).subspan(r * k, k)};
  }
};

// The top k of softmax(logits[r] / temperature) for each of `rows` rows of `classes` logits;
// ties go to the lower index. INVALID_ARGUMENT when the sizes disagree, k is outside [1, classes]
// or the temperature is not positive.
absl::StatusOr<TeacherTargets> TopKTargets(absl::Span<const float> logits, int64_t rows,
                                           int classes, double temperature, int k);

}  // namespace strait::site
