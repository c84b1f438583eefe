#include "site/nn/teacher_targets.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace strait::site {

absl::StatusOr<TeacherTargets> TopKTargets(absl::Span<const float> logits, int64_t rows,
                                           int classes, double temperature, int k) {
  if (rows < 0 || classes < 1 || static_cast<int64_t>(logits.size()) != rows * classes) {
    return absl::InvalidArgumentError(absl::StrCat("teacher targets: ", logits.size(),
                                                   " logits are not ", rows, " rows of ", classes));
  }
  if (k < 1 || k > classes || !(temperature > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("teacher targets: top ", k, " of ", classes, " at temperature ", temperature));
  }
  TeacherTargets out;
  out.rows = rows;
  out.k = k;
  out.indices.resize(rows * k);
  out.probabilities.resize(rows * k);
  std::vector<int32_t> order(classes);
  for (int64_t r = 0; r < rows; ++r) {
    const absl::Span<const float> z = logits.subspan(r * classes, classes);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    const double top = z[order[0]] / temperature;
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] / temperature - top);
    for (int i = 0; i < k; ++i) {
      out.indices[r * k + i] = order[i];
      out.probabilities[r * k + i] =
          static_cast<float>(std::exp(z[order[i]] / temperature - top) / sum);
    }
  }
  return out;
}

}  // namespace strait::site
