#include "gateway/http/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/http/proto_names.h"

namespace strait::gateway {
namespace {

using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

// HELP text escaping: backslash and line feed (quotes stay as they are).
std::string EscapeHelp(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatInteger(uint64_t value) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, end);
}

// Appends families to one text; a family's samples are written right after its HELP/TYPE lines, so
// callers write one family at a time (the format requires a family's lines to be contiguous).
class Exposition {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    name_ = name;
    out_.append("# HELP ").append(name).append(" ").append(EscapeHelp(help)).append("\n");
    out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  }
  void Sample(const Labels& labels, double value) { Line(labels, FormatSampleValue(value)); }
  void Sample(const Labels& labels, uint64_t value) { Line(labels, FormatInteger(value)); }
  std::string Take() { return std::move(out_); }

 private:
  void Line(const Labels& labels, const std::string& value) {
    out_.append(name_);
    if (labels.size() > 0) {
      out_ += '{';
      bool first = true;
      for (const auto& [key, label_value] : labels) {
        if (!first) out_ += ',';
        first = false;
        out_.append(key).append("=\"").append(EscapeLabelValue(label_value)).append("\"");
      }
      out_ += '}';
    }
    out_.append(" ").append(value).append("\n");
  }

  std::string name_;
  std::string out_;
};

// Labels of a link: boundary, direction, the producing and consuming sites, and with replicas the
// pipeline.
struct LinkLabels {
  std::string boundary;
  std::string_view direction;
  std::string_view from;
  std::string_view to;
  std::string replica;  // Empty without replicas.
};

LinkLabels LabelsOf(const v1::FederationState& state, const v1::LinkMetrics& link) {
  const v1::FederationView& view = state.view();
  const uint64_t replicas = std::max<uint64_t>(view.replicas(), 1);
  const uint64_t stages = static_cast<uint64_t>(view.sites_size()) / replicas;
  // sites[r * S + s] runs stage s of pipeline r (federation.proto).
  auto id = [&](uint64_t stage) -> std::string_view {
    const uint64_t slot = link.replica() * stages + stage;
    return stage < stages && slot < static_cast<uint64_t>(view.sites_size())
               ? std::string_view(view.sites(static_cast<int>(slot)).id())
               : "";
  };
  uint64_t lower = link.boundary();
  bool forward = link.direction() == v1::FORWARD;
  return {FormatInteger(link.boundary()), DirectionName(link.direction()),
          forward ? id(lower) : id(lower + 1), forward ? id(lower + 1) : id(lower),
          replicas > 1 ? FormatInteger(link.replica()) : std::string()};
}

void WriteGateway(const v1::FederationState& state, Exposition& e) {
  e.Family("strait_federation_info", "gauge",
           "The federation the gateway serves (value always 1).");
  e.Sample({{"federation", state.view().federation()}}, uint64_t{1});
  e.Family("strait_federation_generation", "gauge", "Rollback generation of the federation.");
  e.Sample({}, uint64_t{state.view().generation()});
  if (state.view().has_common_checkpoint()) {
    e.Family("strait_federation_common_checkpoint_step", "gauge",
             "Newest step for which every site has a checkpoint.");
    e.Sample({}, state.view().common_checkpoint_step());
  }
  e.Family("strait_gateway_uptime_seconds", "gauge", "Seconds since the gateway started.");
  e.Sample({}, state.uptime_s());
  e.Family("strait_gateway_stored_bytes", "gauge", "Bytes of frames held in the mailbox.");
  e.Sample({}, state.stored_bytes());
  e.Family("strait_gateway_memory_budget_bytes", "gauge", "Byte budget for stored frames.");
  e.Sample({}, state.memory_budget_bytes());
  e.Family("strait_gateway_waiting_pulls", "gauge", "Pulls waiting for their frame.");
  e.Sample({}, state.waiting_pulls());
  e.Family("strait_gateway_accounting_errors_total", "counter",
           "Broken mailbox accounting invariants (a gateway bug; 0 normally).");
  e.Sample({}, state.accounting_errors());
  if (state.has_sums()) {  // Replicas' secure sums (gateway/aggregate/replica_sums.h).
    const v1::ReplicaSumsState& sums = state.sums();
    e.Family("strait_replica_sum_rounds_total", "counter",
             "Secure sums of stage replicas made (one per stage and round).");
    e.Sample({}, sums.rounds());
    e.Family("strait_replica_sum_bytes_total", "counter",
             "Wire bytes of masked vectors received (in) and sums sent (out).");
    e.Sample({{"direction", "in"}}, sums.bytes_in());
    e.Sample({{"direction", "out"}}, sums.bytes_out());
    e.Family("strait_replica_sum_round_seconds_total", "counter",
             "Seconds from each round's first masked vector to its sum, summed over rounds.");
    e.Sample({}, sums.round_seconds());
  }
  e.Family("strait_gateway_rejected_frames_total", "counter",
           "Messages refused by the gateway plus frames sites refused to open.");
  e.Sample({}, state.rejected_frames());
  e.Family("strait_gateway_rejected_frames_by_reason_total", "counter",
           "Refused messages and frames by reason.");
  // Sorted by reason: protobuf map iteration order is unspecified.
  std::map<std::string, uint64_t> reasons(state.rejected_by_reason().begin(),
                                          state.rejected_by_reason().end());
  for (const auto& [reason, count] : reasons) e.Sample({{"reason", reason}}, count);
  e.Family("strait_gateway_alerts", "gauge", "Alerts in the gateway's recent window by severity.");
  for (auto severity : {v1::Alert::INFO, v1::Alert::WARNING, v1::Alert::CRITICAL}) {
    uint64_t count = 0;
    for (const v1::Alert& alert : state.alerts()) count += alert.severity() == severity ? 1 : 0;
    e.Sample({{"severity", SeverityName(severity)}}, count);
  }
}

void WriteSites(const v1::FederationState& state, Exposition& e) {
  const auto& view_sites = state.view().sites();
  e.Family("strait_site_info", "gauge",
           "A site of the federation: stage, layer range [start, end), device, workers (value 1).");
  for (int stage = 0; stage < view_sites.size(); ++stage) {
    const v1::SiteInfo& s = view_sites[stage];
    e.Sample({{"site", s.id()},
              {"stage", FormatInteger(stage)},
              {"layer_start", FormatInteger(s.layers().start())},
              {"layer_end", FormatInteger(s.layers().end())},
              {"device", s.device()},
              {"workers", FormatInteger(s.workers())}},
             uint64_t{1});
  }
  e.Family("strait_site_state", "gauge", "1 for the site's current state, 0 for the others.");
  for (const v1::SiteInfo& s : view_sites) {
    for (auto st :
         {v1::SITE_ABSENT, v1::SITE_JOINED, v1::SITE_TRAINING, v1::SITE_DOWN, v1::SITE_DONE}) {
      e.Sample({{"site", s.id()}, {"state", SiteStateName(st)}},
               uint64_t{s.state() == st ? 1u : 0u});
    }
  }
  e.Family("strait_site_epoch", "gauge", "Current join epoch of the site.");
  for (const v1::SiteInfo& s : view_sites) e.Sample({{"site", s.id()}}, uint64_t{s.epoch()});
  e.Family("strait_site_step", "gauge", "Last training step the site reported.");
  for (const v1::SiteInfo& s : view_sites) e.Sample({{"site", s.id()}}, s.step());
  e.Family("strait_site_checkpoint_step", "gauge", "Newest checkpoint step the site reported.");
  for (const v1::SiteInfo& s : view_sites) e.Sample({{"site", s.id()}}, s.checkpoint_step());

  const auto& metrics = state.sites();
  e.Family("strait_site_loss", "gauge", "Training loss last reported (the last stage only).");
  for (const v1::SiteMetrics& m : metrics) {
    if (m.last_report().has_loss()) e.Sample({{"site", m.site_id()}}, m.last_report().loss());
  }
  e.Family("strait_site_heldout_loss", "gauge",
           "Cross-entropy per target on the held-out split, newest evaluation (every "
           "training.eval_every steps and after the last step; the last stage only; nats per "
           "token for a language model).");
  for (const v1::SiteMetrics& m : metrics) {
    if (m.last_report().has_evaluation()) {
      e.Sample({{"site", m.site_id()}}, m.last_report().evaluation().loss());
    }
  }
  e.Family("strait_site_heldout_accuracy", "gauge",
           "Share of held-out targets predicted (test accuracy; next-token accuracy).");
  for (const v1::SiteMetrics& m : metrics) {
    if (m.last_report().has_evaluation()) {
      e.Sample({{"site", m.site_id()}}, m.last_report().evaluation().accuracy());
    }
  }
  e.Family("strait_site_samples_per_second", "gauge", "Training throughput last reported.");
  for (const v1::SiteMetrics& m : metrics) {
    e.Sample({{"site", m.site_id()}}, m.last_report().samples_per_second());
  }
  e.Family("strait_site_time_seconds", "gauge",
           "Seconds the site spent in each phase during its last report interval.");
  for (const v1::SiteMetrics& m : metrics) {
    const v1::SiteReport& r = m.last_report();
    const std::pair<std::string_view, double> phases[] = {
        {"compute", r.compute_s()}, {"wait", r.wait_s()}, {"encode", r.encode_s()},
        {"decode", r.decode_s()},   {"seal", r.seal_s()}, {"open", r.open_s()}};
    for (const auto& [phase, seconds] : phases) {
      e.Sample({{"site", m.site_id()}, {"phase", phase}}, seconds);
    }
  }
  e.Family("strait_site_eta_seconds", "gauge", "Estimated seconds until the job ends.");
  for (const v1::SiteMetrics& m : metrics)
    e.Sample({{"site", m.site_id()}}, m.last_report().eta_s());
  e.Family("strait_site_rejected_frames", "gauge",
           "Frames the site refused to open (tampered, replayed, ...), as last reported.");
  for (const v1::SiteMetrics& m : metrics) {
    e.Sample({{"site", m.site_id()}}, m.last_report().rejected_frames());
  }
  e.Family("strait_site_restarts_total", "counter", "Rejoins of the site after its first join.");
  for (const v1::SiteMetrics& m : metrics) e.Sample({{"site", m.site_id()}}, m.restarts());
  e.Family("strait_site_last_seen_seconds", "gauge", "Seconds since the site's last message.");
  for (const v1::SiteMetrics& m : metrics) e.Sample({{"site", m.site_id()}}, m.last_seen_s_ago());
}

void WriteLinks(const v1::FederationState& state, Exposition& e) {
  std::vector<LinkLabels> labels;
  for (const v1::LinkMetrics& link : state.links()) labels.push_back(LabelsOf(state, link));
  // Writes one family with a sample per link; `value` maps a link to its sample (or nullopt).
  auto family = [&](std::string_view name, std::string_view type, std::string_view help,
                    auto value) {
    e.Family(name, type, help);
    for (int i = 0; i < state.links_size(); ++i) {
      const LinkLabels& l = labels[i];
      auto v = value(state.links(i));
      if (!v.has_value()) continue;
      Labels link_labels = {
          {"boundary", l.boundary}, {"direction", l.direction}, {"from", l.from}, {"to", l.to}};
      if (!l.replica.empty()) link_labels.push_back({"replica", l.replica});
      e.Sample(link_labels, *v);
    }
  };
  using U = std::optional<uint64_t>;
  using D = std::optional<double>;
  family("strait_link_frames_total", "counter", "Frames relayed across the link.",
         [](const v1::LinkMetrics& l) { return U(l.frames()); });
  family("strait_link_raw_bytes_total", "counter", "Tensor bytes before encoding (uncompressed).",
         [](const v1::LinkMetrics& l) { return U(l.raw_bytes()); });
  family("strait_link_wire_bytes_total", "counter", "Frame bytes on the wire (encoded, sealed).",
         [](const v1::LinkMetrics& l) { return U(l.wire_bytes()); });
  family("strait_link_compression_ratio", "gauge", "Raw bytes over wire bytes since start.",
         [](const v1::LinkMetrics& l) {
           return l.wire_bytes() == 0 ? D() : D(double(l.raw_bytes()) / double(l.wire_bytes()));
         });
  family("strait_link_push_to_pull_latency_seconds", "gauge",
         "Mean time from a frame's push until its consumer pulled it.",
         [](const v1::LinkMetrics& l) { return D(l.mean_push_to_pull_ms() / 1000.0); });
  family("strait_link_queue_depth", "gauge", "Frames of the link held in the mailbox.",
         [](const v1::LinkMetrics& l) { return U(l.queue_depth()); });
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, end);
}

std::string RenderPrometheusText(const v1::FederationState& state) {
  Exposition e;
  WriteGateway(state, e);
  WriteSites(state, e);
  WriteLinks(state, e);
  return e.Take();
}

}  // namespace strait::gateway
