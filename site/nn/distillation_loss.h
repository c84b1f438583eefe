// The distillation loss of knowledge sharing (issue 46) for one token: a teacher's top-k tempered
// probabilities teach the student's logits.
//   loss = alpha * CE(softmax(z), label) + (1 - alpha) * tau^2 * KL(p || q)
// where q = softmax(z / tau) over the vocabulary, read on the teacher's k buckets plus one bucket
// for the rest of the vocabulary, and p the teacher's tempered probabilities on its top k with the
// remaining mass r = 1 - sum(p) as the rest's bucket. The tau^2 keeps the soft term's gradient on
// the scale of the hard one's (Hinton et al.). Pure arithmetic on host spans; thread-compatible.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strait::site {

struct DistillTerms {
  float alpha = 0.5f;        // Weight of the labels' cross-entropy.
  float temperature = 1.0f;  // tau > 0.
};

// What the teacher sends for one token: vocabulary indices (distinct) and their tempered
// probabilities, summing to at most 1.
struct TeacherTopK {
  absl::Span<const int32_t> indices;
  absl::Span<const float> probabilities;
};

struct DistillationResult {
  double loss = 0;           // The whole loss above.
  double cross_entropy = 0;  // -log softmax(z)[label], what the student is judged by.
};

// The loss of `logits` (the student's, one token, the whole vocabulary) for `label`, and its
// gradient in `grad` (same size as `logits`). INVALID_ARGUMENT (naming the value) for a label or
// index outside the vocabulary, a repeated index, sizes that differ, probabilities outside [0, 1]
// or summing past 1 (beyond rounding), or terms outside their ranges.
absl::StatusOr<DistillationResult> DistillationLoss(absl::Span<const float> logits, int32_t label,
                                                    const TeacherTopK& teacher,
                                                    const DistillTerms& terms,
                                                    absl::Span<float> grad);

}  // namespace strait::site
