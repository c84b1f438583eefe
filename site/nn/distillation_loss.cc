#include "site/nn/distillation_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strait::site {
namespace {

// softmax(logits / tau), in double.
std::vector<double> Softmax(absl::Span<const float> logits, double tau) {
  double top = -INFINITY;
  for (float z : logits) top = std::max(top, z / tau);
  std::vector<double> q(logits.size());
  double sum = 0;
  for (size_t j = 0; j < logits.size(); ++j) sum += q[j] = std::exp(logits[j] / tau - top);
  for (double& v : q) v /= sum;
  return q;
}

absl::Status Check(absl::Span<const float> logits, int32_t label, const TeacherTopK& teacher,
                   const DistillTerms& terms, absl::Span<float> grad) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  if (vocab == 0 || grad.size() != logits.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("distillation: ", logits.size(), " logits and a gradient of ", grad.size()));
  }
  if (label < 0 || label >= vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("distillation: label ", label, " outside a vocabulary of ", vocab));
  }
  if (!(terms.alpha >= 0 && terms.alpha <= 1) || !(terms.temperature > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distillation: alpha ", terms.alpha, " (0..1), temperature ", terms.temperature, " (> 0)"));
  }
  if (teacher.indices.size() != teacher.probabilities.size()) {
    return absl::InvalidArgumentError(absl::StrCat("distillation: ", teacher.indices.size(),
                                                   " teacher indices and ",
                                                   teacher.probabilities.size(), " probabilities"));
  }
  std::vector<bool> seen(vocab, false);
  double mass = 0;
  for (size_t i = 0; i < teacher.indices.size(); ++i) {
    const int32_t index = teacher.indices[i];
    const float p = teacher.probabilities[i];
    if (index < 0 || index >= vocab || seen[index]) {
      return absl::InvalidArgumentError(absl::StrCat("distillation: teacher index ", index,
                                                     index >= 0 && index < vocab ? " repeated" : "",
                                                     " (vocabulary of ", vocab, ")"));
    }
    if (!(p >= 0 && p <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("distillation: teacher probability ", p));
    }
    seen[index] = true;
    mass += p;
  }
  if (mass > 1 + 1e-4) {
    return absl::InvalidArgumentError(
        absl::StrCat("distillation: the teacher's probabilities sum to ", mass));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DistillationResult> DistillationLoss(absl::Span<const float> logits, int32_t label,
                                                    const TeacherTopK& teacher,
                                                    const DistillTerms& terms,
                                                    absl::Span<float> grad) {
  if (absl::Status s = Check(logits, label, teacher, terms, grad); !s.ok()) return s;
  const double alpha = terms.alpha, tau = terms.temperature;
  // Hard term: -log softmax(z)_label; its gradient softmax(z) - onehot(label).
  const std::vector<double> hard = Softmax(logits, 1.0);
  const double cross_entropy = -std::log(std::max(hard[label], 1e-300));
  double loss = alpha * cross_entropy;
  // Soft term on the buckets: the teacher's k and the rest.
  const std::vector<double> q = Softmax(logits, tau);
  std::vector<bool> in_top(logits.size(), false);
  double p_top = 0, q_top = 0, kl = 0;
  for (size_t i = 0; i < teacher.indices.size(); ++i) {
    const int32_t j = teacher.indices[i];
    const double p = teacher.probabilities[i];
    in_top[j] = true;
    p_top += p;
    q_top += q[j];
    if (p > 0) kl += p * std::log(p / std::max(q[j], 1e-300));
  }
  const double rest_p = std::max(0.0, 1 - p_top), rest_q = std::max(1e-300, 1 - q_top);
  if (rest_p > 0) kl += rest_p * std::log(rest_p / rest_q);
  const double soft = (1 - alpha) * tau * tau;
  loss += soft * kl;
  // d KL / d z_j = (q_j - p_j [j in top] - rest_p q_j / rest_q [j not in top]) / tau.
  std::vector<double> p_of(logits.size(), 0.0);
  for (size_t i = 0; i < teacher.indices.size(); ++i) {
    p_of[teacher.indices[i]] = teacher.probabilities[i];
  }
  for (size_t j = 0; j < logits.size(); ++j) {
    const double target = in_top[j] ? p_of[j] : rest_p * q[j] / rest_q;
    const double hard_grad = hard[j] - (static_cast<int32_t>(j) == label ? 1.0 : 0.0);
    grad[j] = static_cast<float>(alpha * hard_grad + soft * (q[j] - target) / tau);
  }
  return DistillationResult{.loss = loss, .cross_entropy = cross_entropy};
}

}  // namespace strait::site
