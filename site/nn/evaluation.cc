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
  if (!model.IsLanguageModel()) {
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
  if (model.IsLanguageModel()) {
    out["val_loss"] = e.loss;
    out["val_bits_per_byte"] = BitsPerByte(e);
    out["val_bytes_per_token"] = e.bytes_per_token;
  }
}

std::string DescribeEvaluationAt(const ModelSpec& model, const StepEvaluation& e) {
  return absl::StrFormat("step %d: %s", e.step, DescribeEvaluation(model, e.evaluation));
}

nlohmann::json EvaluationsJson(const ModelSpec& model, const std::vector<StepEvaluation>& all) {
  nlohmann::json out = nlohmann::json::array();
  for (const StepEvaluation& e : all) {
    nlohmann::json entry = {{"step", e.step}, {"loss", e.evaluation.loss}};
    AddEvaluationJson(model, e.evaluation, entry);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace strait::site
