#include "gateway/http/prometheus_text.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/http/proto_names.h"

namespace strait::gateway {
namespace {

using prometheus::Labels;  // std::map<std::string, std::string>: label name -> value.

// One scrape's metrics in a fresh prometheus::Registry. The snapshot holds absolute values, so a
// counter is made at zero and incremented once by its value: its TYPE stays `counter` and nothing
// carries over between scrapes. Families are serialized in the order they are added (the
// registry's own Collect puts every counter family before every gauge family), their samples
// sorted by labels (a family keeps them in a hash map). A family without samples is left out,
// HELP and TYPE too (prometheus-cpp's Family::Collect). HELP texts are written as they are: they
// must hold no backslash or line feed.
class Exposition {
 public:
  void Gauge(const std::string& name, const std::string& help) {
    counter_ = nullptr;
    gauge_ = &prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
    order_.push_back(gauge_);
  }
  void Counter(const std::string& name, const std::string& help) {
    gauge_ = nullptr;
    counter_ = &prometheus::BuildCounter().Name(name).Help(help).Register(registry_);
    order_.push_back(counter_);
  }
  // A sample of the family added last.
  void Sample(const Labels& labels, double value) {
    if (gauge_ != nullptr) {
      gauge_->Add(labels).Set(value);
    } else {
      counter_->Add(labels).Increment(value);
    }
  }
  std::string Serialize() const {
    std::vector<prometheus::MetricFamily> families;
    for (const prometheus::Collectable* family : order_) {
      for (prometheus::MetricFamily& collected : family->Collect()) {
        std::sort(collected.metric.begin(), collected.metric.end(),
                  [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                    return a.label < b.label;
                  });
        families.push_back(std::move(collected));
      }
    }
    return prometheus::TextSerializer().Serialize(families);
  }

 private:
  prometheus::Registry registry_;
  std::vector<const prometheus::Collectable*> order_;
  prometheus::Family<prometheus::Gauge>* gauge_ = nullptr;
  prometheus::Family<prometheus::Counter>* counter_ = nullptr;
};

// The labels of a link: boundary, direction, the producing and consuming sites (from, to), with
// replicas the pipeline (replica), and a teacher's link (knowledge sharing) teacher="true".
Labels LabelsOf(const v1::FederationState& state, const v1::LinkMetrics& link) {
  const v1::FederationView& view = state.view();
  std::vector<std::string> students, teachers;  // Member order: replica by replica, then teacher.
  for (const v1::SiteInfo& site : view.sites()) {
    (site.teacher() ? teachers : students).push_back(site.id());
  }
  const uint64_t replicas = std::max<uint64_t>(view.replicas(), 1);
  const uint64_t stages = students.size() / replicas;
  // students[r * S + s] runs stage s of pipeline r (federation.proto).
  auto id = [&](uint64_t stage) -> std::string {
    const uint64_t slot = link.replica() * stages + stage;
    return stage < stages && slot < students.size() ? students[slot] : "";
  };
  const uint64_t lower = link.boundary();
  const bool forward = link.direction() == v1::FORWARD;
  std::string from = forward ? id(lower) : id(lower + 1), to = forward ? id(lower + 1) : id(lower);
  if (link.teacher()) {  // core/teach_links.h: teacher stage b onwards; BACKWARD, the pace.
    auto teacher = [&](uint64_t t) { return t < teachers.size() ? teachers[t] : ""; };
    const std::string student_last = stages > 0 ? students[stages - 1] : "";
    from = forward ? teacher(lower) : student_last;
    to = !forward ? teacher(0) : lower + 1 < teachers.size() ? teacher(lower + 1) : student_last;
  }
  Labels labels = {{"boundary", std::to_string(link.boundary())},
                   {"direction", std::string(DirectionName(link.direction()))},
                   {"from", from},
                   {"to", to}};
  if (replicas > 1) labels["replica"] = std::to_string(link.replica());
  if (link.teacher()) labels["teacher"] = "true";
  return labels;
}

void WriteGateway(const v1::FederationState& state, Exposition& e) {
  e.Gauge("strait_federation_info", "The federation the gateway serves (value always 1).");
  e.Sample({{"federation", state.view().federation()}}, 1);
  e.Gauge("strait_federation_generation", "Rollback generation of the federation.");
  e.Sample({}, state.view().generation());
  if (state.view().has_common_checkpoint()) {
    e.Gauge("strait_federation_common_checkpoint_step",
            "Newest step for which every site has a checkpoint.");
    e.Sample({}, state.view().common_checkpoint_step());
  }
  e.Gauge("strait_gateway_uptime_seconds", "Seconds since the gateway started.");
  e.Sample({}, state.uptime_s());
  e.Gauge("strait_gateway_stored_bytes", "Bytes of frames held in the mailbox.");
  e.Sample({}, state.stored_bytes());
  e.Gauge("strait_gateway_memory_budget_bytes", "Byte budget for stored frames.");
  e.Sample({}, state.memory_budget_bytes());
  e.Gauge("strait_gateway_waiting_pulls", "Pulls waiting for their frame.");
  e.Sample({}, state.waiting_pulls());
  e.Counter("strait_gateway_accounting_errors_total",
            "Broken mailbox accounting invariants (a gateway bug; 0 normally).");
  e.Sample({}, state.accounting_errors());
  if (state.has_sums()) {  // Replicas' secure sums (gateway/aggregate/replica_sums.h).
    const v1::ReplicaSumsState& sums = state.sums();
    e.Counter("strait_replica_sum_rounds_total",
              "Secure sums of stage replicas made (one per stage and round).");
    e.Sample({}, sums.rounds());
    e.Counter("strait_replica_sum_bytes_total",
              "Wire bytes of masked vectors received (in) and sums sent (out).");
    e.Sample({{"direction", "in"}}, sums.bytes_in());
    e.Sample({{"direction", "out"}}, sums.bytes_out());
    e.Counter("strait_replica_sum_round_seconds_total",
              "Seconds from each round's first masked vector to its sum, summed over rounds.");
    e.Sample({}, sums.round_seconds());
  }
  e.Counter("strait_gateway_rejected_frames_total",
            "Messages refused by the gateway plus frames sites refused to open.");
  e.Sample({}, state.rejected_frames());
  e.Counter("strait_gateway_rejected_frames_by_reason_total",
            "Refused messages and frames by reason.");
  // Sorted by reason: protobuf map iteration order is unspecified.
  std::map<std::string, uint64_t> reasons(state.rejected_by_reason().begin(),
                                          state.rejected_by_reason().end());
  for (const auto& [reason, count] : reasons) e.Sample({{"reason", reason}}, count);
  e.Gauge("strait_gateway_alerts", "Alerts in the gateway's recent window by severity.");
  for (auto severity : {v1::Alert::INFO, v1::Alert::WARNING, v1::Alert::CRITICAL}) {
    uint64_t count = 0;
    for (const v1::Alert& alert : state.alerts()) count += alert.severity() == severity ? 1 : 0;
    e.Sample({{"severity", std::string(SeverityName(severity))}}, count);
  }
}

void WriteSites(const v1::FederationState& state, Exposition& e) {
  const auto& view_sites = state.view().sites();
  e.Gauge("strait_site_info",
          "A site of the federation: stage, layer range [start, end), device, workers (value 1).");
  for (int stage = 0; stage < view_sites.size(); ++stage) {
    const v1::SiteInfo& s = view_sites[stage];
    e.Sample({{"site", s.id()},
              {"stage", std::to_string(stage)},
              {"layer_start", std::to_string(s.layers().start())},
              {"layer_end", std::to_string(s.layers().end())},
              {"device", s.device()},
              {"workers", std::to_string(s.workers())}},
             1);
  }
  e.Gauge("strait_site_state", "1 for the site's current state, 0 for the others.");
  for (const v1::SiteInfo& s : view_sites) {
    for (auto st :
         {v1::SITE_ABSENT, v1::SITE_JOINED, v1::SITE_TRAINING, v1::SITE_DOWN, v1::SITE_DONE}) {
      e.Sample({{"site", s.id()}, {"state", std::string(SiteStateName(st))}},
               s.state() == st ? 1 : 0);
    }
  }
  e.Gauge("strait_site_epoch", "Current join epoch of the site.");
  for (const v1::SiteInfo& s : view_sites) e.Sample({{"site", s.id()}}, s.epoch());
  e.Gauge("strait_site_step", "Last training step the site reported.");
  for (const v1::SiteInfo& s : view_sites) e.Sample({{"site", s.id()}}, s.step());
  e.Gauge("strait_site_checkpoint_step", "Newest checkpoint step the site reported.");
  for (const v1::SiteInfo& s : view_sites) e.Sample({{"site", s.id()}}, s.checkpoint_step());

  const auto& metrics = state.sites();
  e.Gauge("strait_site_loss", "Training loss last reported (the last stage only).");
  for (const v1::SiteMetrics& m : metrics) {
    if (m.last_report().has_loss()) e.Sample({{"site", m.site_id()}}, m.last_report().loss());
  }
  e.Gauge("strait_site_heldout_loss",
          "Cross-entropy per target on the held-out split, newest evaluation (every "
          "training.eval_every steps and after the last step; the last stage only; nats per "
          "token for a language model).");
  for (const v1::SiteMetrics& m : metrics) {
    if (m.last_report().has_evaluation()) {
      e.Sample({{"site", m.site_id()}}, m.last_report().evaluation().loss());
    }
  }
  e.Gauge("strait_site_heldout_accuracy",
          "Share of held-out targets predicted (test accuracy; next-token accuracy).");
  for (const v1::SiteMetrics& m : metrics) {
    if (m.last_report().has_evaluation()) {
      e.Sample({{"site", m.site_id()}}, m.last_report().evaluation().accuracy());
    }
  }
  e.Gauge("strait_site_samples_per_second", "Training throughput last reported.");
  for (const v1::SiteMetrics& m : metrics) {
    e.Sample({{"site", m.site_id()}}, m.last_report().samples_per_second());
  }
  e.Gauge("strait_site_time_seconds",
          "Seconds the site spent in each phase during its last report interval.");
  for (const v1::SiteMetrics& m : metrics) {
    const v1::SiteReport& r = m.last_report();
    const std::pair<std::string_view, double> phases[] = {
        {"compute", r.compute_s()}, {"wait", r.wait_s()}, {"encode", r.encode_s()},
        {"decode", r.decode_s()},   {"seal", r.seal_s()}, {"open", r.open_s()}};
    for (const auto& [phase, seconds] : phases) {
      e.Sample({{"site", m.site_id()}, {"phase", std::string(phase)}}, seconds);
    }
  }
  e.Gauge("strait_site_eta_seconds", "Estimated seconds until the job ends.");
  for (const v1::SiteMetrics& m : metrics)
    e.Sample({{"site", m.site_id()}}, m.last_report().eta_s());
  e.Gauge("strait_site_rejected_frames",
          "Frames the site refused to open (tampered, replayed, ...), as last reported.");
  for (const v1::SiteMetrics& m : metrics) {
    e.Sample({{"site", m.site_id()}}, m.last_report().rejected_frames());
  }
  e.Counter("strait_site_restarts_total", "Rejoins of the site after its first join.");
  for (const v1::SiteMetrics& m : metrics) e.Sample({{"site", m.site_id()}}, m.restarts());
  e.Gauge("strait_site_last_seen_seconds", "Seconds since the site's last message.");
  for (const v1::SiteMetrics& m : metrics) e.Sample({{"site", m.site_id()}}, m.last_seen_s_ago());
}

void WriteLinks(const v1::FederationState& state, Exposition& e) {
  std::vector<Labels> labels;
  for (const v1::LinkMetrics& link : state.links()) labels.push_back(LabelsOf(state, link));
  // Adds one family with a sample per link; `value` maps a link to its sample (or nullopt).
  auto family = [&](bool counter, const std::string& name, const std::string& help, auto value) {
    if (counter) {
      e.Counter(name, help);
    } else {
      e.Gauge(name, help);
    }
    for (int i = 0; i < state.links_size(); ++i) {
      std::optional<double> v = value(state.links(i));
      if (v.has_value()) e.Sample(labels[i], *v);
    }
  };
  using D = std::optional<double>;
  constexpr bool kCounter = true, kGauge = false;
  family(kCounter, "strait_link_frames_total", "Frames relayed across the link.",
         [](const v1::LinkMetrics& l) { return D(l.frames()); });
  family(kCounter, "strait_link_raw_bytes_total", "Tensor bytes before encoding (uncompressed).",
         [](const v1::LinkMetrics& l) { return D(l.raw_bytes()); });
  family(kCounter, "strait_link_wire_bytes_total", "Frame bytes on the wire (encoded, sealed).",
         [](const v1::LinkMetrics& l) { return D(l.wire_bytes()); });
  family(kGauge, "strait_link_compression_ratio", "Raw bytes over wire bytes since start.",
         [](const v1::LinkMetrics& l) {
           return l.wire_bytes() == 0 ? D() : D(double(l.raw_bytes()) / double(l.wire_bytes()));
         });
  family(kGauge, "strait_link_push_to_pull_latency_seconds",
         "Mean time from a frame's push until its consumer pulled it.",
         [](const v1::LinkMetrics& l) { return D(l.mean_push_to_pull_ms() / 1000.0); });
  family(kGauge, "strait_link_queue_depth", "Frames of the link held in the mailbox.",
         [](const v1::LinkMetrics& l) { return D(l.queue_depth()); });
}

}  // namespace

std::string RenderPrometheusText(const v1::FederationState& state) {
  Exposition e;
  WriteGateway(state, e);
  WriteSites(state, e);
  WriteLinks(state, e);
  return e.Serialize();
}

}  // namespace strait::gateway
