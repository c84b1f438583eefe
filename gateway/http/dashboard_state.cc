#include "gateway/http/dashboard_state.h"

#include <google/protobuf/util/json_util.h>

#include "gateway/http/prometheus_text.h"

namespace strait::gateway {
namespace {

std::string ToJson(const v1::FederationState& state) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a valid message only fails on invalid UTF-8 in a string field; serve null then.
  if (!google::protobuf::util::MessageToJsonString(state, &json, options).ok()) return "null";
  return json;
}

}  // namespace

DashboardState::DashboardState(size_t history_capacity, uint64_t sample_interval_ms)
    : sample_interval_ms_(sample_interval_ms),
      metrics_(std::make_shared<const std::string>(RenderPrometheusText({}))),
      state_json_(std::make_shared<const std::string>(ToJson({}))),
      history_(history_capacity) {}

void DashboardState::Update(const v1::FederationState& state, uint64_t unix_ms) {
  // Render outside the lock: readers are never held up by a render.
  auto metrics = std::make_shared<const std::string>(RenderPrometheusText(state));
  auto json = std::make_shared<const std::string>(ToJson(state));
  std::lock_guard lock(mu_);
  sampled_unix_ms_ = unix_ms;
  metrics_ = std::move(metrics);
  state_json_ = std::move(json);
  history_.Add(state, unix_ms);
}

std::shared_ptr<const std::string> DashboardState::MetricsText() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

std::string DashboardState::StateJson(uint64_t since_unix_ms) const {
  std::shared_ptr<const std::string> state;
  std::string history;
  uint64_t sampled;
  {
    std::lock_guard lock(mu_);
    state = state_json_;
    sampled = sampled_unix_ms_;
    history = history_.ToJson(since_unix_ms);
  }
  std::string out;
  out.reserve(state->size() + history.size() + 96);
  out.append("{\"sampled_unix_ms\":").append(std::to_string(sampled));
  out.append(",\"sample_interval_ms\":").append(std::to_string(sample_interval_ms_));
  out.append(",\"state\":").append(*state);
  out.append(",\"history\":").append(history).append("}");
  return out;
}

}  // namespace strait::gateway
