#include "site/daemon/rank_messages.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {
namespace {

// Floats travel as their bytes: every rank of a site runs on one architecture (x86-64 or arm64,
// both little-endian), checked by the identical job text at the hello.
std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), sizeof(float) * values.size());
}

absl::StatusOr<std::vector<float>> Floats(const std::string& bytes, const char* what) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bytes.size(), " bytes are not whole floats"));
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace

v1::RankCallOrder ToOrder(const RankCall& c) {
  v1::RankCallOrder o;
  o.set_op(static_cast<uint32_t>(c.op));
  o.set_step(c.step);
  o.set_microbatch(c.microbatch);
  o.set_rows(c.rows);
  o.set_training(c.training);
  o.set_last_of_step(c.last_of_step);
  o.set_wants_output(c.wants_output);
  o.set_weights(c.weights);
  o.mutable_layer_weights()->Add(c.layer_weights.begin(), c.layer_weights.end());
  o.set_scale(c.scale);
  o.set_layer_start(c.layer_start);
  o.set_layer_end(c.layer_end);
  o.set_values(Bytes(c.values));
  o.set_previous(Bytes(c.previous));
  o.set_lookahead(Bytes(c.lookahead));
  o.mutable_labels()->Add(c.labels.begin(), c.labels.end());
  return o;
}

absl::StatusOr<RankCall> FromOrder(const v1::RankCallOrder& o) {
  if (o.op() > static_cast<uint32_t>(RankOp::kLastOp)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown mirrored call ", o.op()));
  }
  RankCall c{.op = static_cast<RankOp>(o.op()),
             .step = o.step(),
             .microbatch = o.microbatch(),
             .rows = o.rows(),
             .training = o.training(),
             .last_of_step = o.last_of_step(),
             .wants_output = o.wants_output(),
             .weights = o.weights(),
             .layer_weights = {o.layer_weights().begin(), o.layer_weights().end()},
             .scale = o.scale(),
             .layer_start = o.layer_start(),
             .layer_end = o.layer_end()};
  STRAIT_ASSIGN_OR_RETURN(c.values, Floats(o.values(), "values"));
  STRAIT_ASSIGN_OR_RETURN(c.previous, Floats(o.previous(), "previous weights"));
  STRAIT_ASSIGN_OR_RETURN(c.lookahead, Floats(o.lookahead(), "lookahead weights"));
  c.labels.assign(o.labels().begin(), o.labels().end());
  return c;
}

v1::RankAnswer StatusAnswer(const absl::Status& status) {
  v1::RankAnswer a;
  a.set_code(static_cast<int32_t>(status.code()));
  a.set_message(std::string(status.message()));
  return a;
}

v1::RankAnswer ToAnswer(const absl::StatusOr<RankResult>& result) {
  if (!result.ok()) return StatusAnswer(result.status());
  v1::RankAnswer a;
  a.set_values(Bytes(result->values));
  a.set_sum(result->sum);
  for (const LossResult& l : result->losses) {
    a.add_loss_sums(l.loss_sum);
    a.add_corrects(l.correct);
  }
  return a;
}

absl::Status AnswerStatus(const v1::RankAnswer& a) {
  if (a.code() == 0) return absl::OkStatus();
  const auto code = a.code() > 0 && a.code() <= static_cast<int>(absl::StatusCode::kUnauthenticated)
                        ? static_cast<absl::StatusCode>(a.code())
                        : absl::StatusCode::kUnknown;
  return absl::Status(code, a.message());
}

absl::StatusOr<RankResult> FromAnswer(const v1::RankAnswer& a) {
  STRAIT_RETURN_IF_ERROR(AnswerStatus(a));
  if (a.loss_sums_size() != a.corrects_size()) {
    return absl::InvalidArgumentError("an answer with unpaired losses and accuracies");
  }
  RankResult r;
  STRAIT_ASSIGN_OR_RETURN(r.values, Floats(a.values(), "answer"));
  r.sum = a.sum();
  for (int i = 0; i < a.loss_sums_size(); ++i) r.losses.push_back({a.loss_sums(i), a.corrects(i)});
  return r;
}

absl::StatusOr<std::chrono::milliseconds> GroupTimeout(double timeout_s) {
  if (!std::isfinite(timeout_s) || timeout_s < kMinGroupTimeoutS || timeout_s > kMaxGroupTimeoutS) {
    return absl::InvalidArgumentError(absl::StrCat("a site's group timeout must be ",
                                                   kMinGroupTimeoutS, " to ", kMaxGroupTimeoutS,
                                                   " s, got ", timeout_s, " s"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
}

}  // namespace strait::site
