#include "site/nn/evaluation.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace strait::site {

Evaluation MeanOverTargets(double loss_sum, int64_t correct, double targets) {
  if (targets == 0) return Evaluation{};
  return Evaluation{loss_sum / targets, static_cast<double>(correct) / targets};
}

double BitsPerByte(const Evaluation& e) { return e.loss / e.bytes_per_token / std::log(2.0); }

std::string DescribeEvaluation(const ModelSpec& model, const Evaluation& e) {
  if (model.family != ModelFamily::kGpt) {
    return absl::StrFormat("test accuracy %.2f%%", 100 * e.accuracy);
  }
  // Bytes per token shows only where a token is not one byte (a SentencePiece tokenizer).
  const std::string per_token =
      e.bytes_per_token == 1.0 ? "" : absl::StrFormat(" at %.3f bytes/token", e.bytes_per_token);
  return absl::StrFormat(
      "validation loss %.4f nats/token (%.4f bits/byte%s), next-token accuracy %.2f%%", e.loss,
      BitsPerByte(e), per_token, 100 * e.accuracy);
}

void AddEvaluationJson(const ModelSpec& model, const Evaluation& e, nlohmann::json& out) {
  out["test_accuracy"] = e.accuracy;
  if (model.family == ModelFamily::kGpt) {
    out["val_loss"] = e.loss;
    out["val_bits_per_byte"] = BitsPerByte(e);
    out["val_bytes_per_token"] = e.bytes_per_token;
  }
}

}  // namespace strait::site
