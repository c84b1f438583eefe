#include "gateway/membership/federation.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/job_agreement.h"
#include "core/status.h"
#include "gateway/membership/member_roles.h"
#include "plan/split_planner.h"

namespace strait::gateway {
namespace {

constexpr size_t kMaxAlerts = 100;

uint64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

v1::GatewayMessage ControlMessage(const v1::SignedKey& key) {
  v1::GatewayMessage message;
  *message.mutable_control()->mutable_neighbour_key() = key;
  return message;
}

v1::GatewayMessage SiteDownMessage(const std::string& site_id) {
  v1::GatewayMessage message;
  message.mutable_control()->mutable_site_down()->set_site_id(site_id);
  return message;
}

v1::GatewayMessage PauseMessage(const std::string& reason) {
  v1::GatewayMessage message;
  message.mutable_control()->mutable_pause()->set_reason(reason);
  return message;
}

v1::GatewayMessage RollbackMessage(uint64_t step, uint32_t generation,
                                   const std::vector<LayerRange>& split) {
  v1::GatewayMessage message;
  v1::Rollback& rollback = *message.mutable_control()->mutable_rollback();
  rollback.set_step(step);
  rollback.set_generation(generation);
  for (const LayerRange& r : split) {
    v1::LayerRange* range = rollback.add_split();
    range->set_start(r.start);
    range->set_end(r.end);
  }
  return message;
}

}  // namespace

Federation::Federation(const JobSpec& spec, const JobView& view,
                       std::function<void(uint32_t)> new_generation,
                       std::function<void(int, const std::string&)> site_down)
    : spec_(spec),
      agreed_job_(AgreedJobText(spec, view.planned)),
      new_generation_(std::move(new_generation)),
      site_down_(std::move(site_down)) {
  for (int slot = 0; slot < spec.MemberSlots(); ++slot) {
    Site site;
    site.info = InitialMemberInfo(spec, view, slot);
    sites_.push_back(std::move(site));
  }
}

absl::Status Federation::CheckJoinRequest(const std::string& site_id, int index,
                                          const v1::JoinRequest& request) const {
  const SiteSpec& expected = ExpectedMember(spec_, index);
  if (request.federation() != spec_.name) {
    return absl::FailedPreconditionError(
        absl::StrCat("site '", site_id, "' asked to join federation '", request.federation(),
                     "'; this gateway serves '", spec_.name, "'"));
  }
  // A planned split's layers are the gateway's to give (in the Rollback): a site's claim may be
  // those of the split before a re-plan.
  const bool layers_agree =
      (spec_.SplitMayMove() && spec_.TeacherStageOf(index) < 0) ||
      (request.layers().start() == static_cast<uint32_t>(expected.layers.start) &&
       request.layers().end() == static_cast<uint32_t>(expected.layers.end));
  if (!layers_agree || request.device() != ToString(expected.device) ||
      request.workers() != static_cast<uint32_t>(expected.workers)) {
    return absl::FailedPreconditionError(
        absl::StrCat("site '", site_id, "' claims layers [", request.layers().start(), ", ",
                     request.layers().end(), ") on ", request.device(), " x", request.workers(),
                     "; the job spec says [", expected.layers.start, ", ", expected.layers.end,
                     ") on ", ToString(expected.device), " x", expected.workers,
                     ": the site and the gateway load different job specs"));
  }
  if (!request.agreed_job().empty() && request.agreed_job() != agreed_job_) {
    return absl::FailedPreconditionError(
        absl::StrCat("site '", site_id, "' loads a job spec that differs from the gateway's: ",
                     FirstDisagreement(agreed_job_, request.agreed_job(), "the gateway's"),
                     "; give every site and the gateway the same file"));
  }
  if (request.key().site_id() != site_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "site '", site_id, "' presented a key signed for '", request.key().site_id(), "'"));
  }
  return absl::OkStatus();
}

absl::Status Federation::CheckRunLengthLocked(const Site& joining,
                                              const v1::JoinRequest& request) const {
  // Sites of the run under way (joined, training or down, not the one joining) fix its length.
  for (const Site& other : sites_) {
    const v1::SiteState state = other.info.state();
    if (&other == &joining || request.total_steps() == 0 || other.total_steps == 0 ||
        state == v1::SITE_ABSENT || state == v1::SITE_DONE) {
      continue;
    }
    if (other.total_steps != request.total_steps()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "site '", joining.info.id(), "' trains ", request.total_steps(), " steps; site '",
          other.info.id(), "' of the run under way trains ", other.total_steps,
          ": start every strait-site with the same --steps (or none); a new run "
          "of another length needs the gateway restarted"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JoinReply> Federation::Join(const std::string& site_id,
                                               const v1::JoinRequest& request,
                                               Clock::time_point now) {
  const int index = spec_.MemberSlot(site_id);
  if (index < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", site_id, "' is not a site of federation '", spec_.name, "'"));
  }
  STRAIT_RETURN_IF_ERROR(CheckJoinRequest(site_id, index, request));
  v1::JoinReply reply;
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Site& site = sites_[index];
    if (site.joins > 0 && request.key().epoch() <= site.info.epoch()) {
      return absl::FailedPreconditionError(
          absl::StrCat("site '", site_id, "' joined with epoch ", request.key().epoch(),
                       "; its last epoch was ", site.info.epoch(), ", a rejoin needs a newer one"));
    }
    STRAIT_RETURN_IF_ERROR(CheckRunLengthLocked(site, request));
    if (site.channel != nullptr) {
      actions.push_back({site.channel, std::nullopt,
                         absl::AbortedError("replaced by a newer join of the same site")});
      site.channel = nullptr;
    }
    if (site.joins > 0) {
      AlertLocked(v1::Alert::WARNING,
                  absl::StrCat("site ", site_id, " rejoined (epoch ", request.key().epoch(), ")"));
      rejoined_at_ = now;
      rejoined_site_ = site_id;
      // Back before its old stream's end was noticed (a fast restart): the same as a failure.
      const v1::SiteState state = site.info.state();
      if (state == v1::SITE_JOINED || state == v1::SITE_TRAINING) {
        MarkDownLocked(index, "it joined again", actions);
      }
    }
    ++site.joins;
    site.total_steps = request.total_steps();
    site.key = request.key();
    site.info.set_epoch(request.key().epoch());
    site.info.set_state(v1::SITE_JOINED);
    site.info.clear_device_names();
    for (const std::string& name : request.device_names()) site.info.add_device_names(name);
    site.info.set_step(request.step());
    // What it can resume from: nothing (0) unless it says so; a stale figure would roll back to a
    // checkpoint the site no longer claims.
    site.info.set_checkpoint_step(request.has_checkpoint() ? request.checkpoint_step() : 0);
    site.last_report.Clear();
    site.last_seen = now;
    for (int neighbour : KeyPartners(spec_, index)) {
      Site& n = sites_[neighbour];
      if (n.key) *reply.add_neighbour_keys() = *n.key;
      if (n.channel != nullptr) actions.push_back({n.channel, ControlMessage(request.key()), {}});
    }
    reply.set_epoch(request.key().epoch());
  }
  Run(actions);
  *reply.mutable_view() = Snapshot({}, now).view();
  spdlog::info("site {} joined (epoch {}, layers [{}, {}))", site_id, request.key().epoch(),
               request.layers().start(), request.layers().end());
  return reply;
}

absl::StatusOr<int> Federation::Attach(const std::string& site_id, uint32_t epoch,
                                       std::shared_ptr<SiteChannel> channel,
                                       Clock::time_point now) {
  const int index = spec_.MemberSlot(site_id);
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index < 0)
      return absl::PermissionDeniedError(absl::StrCat("'", site_id, "' is not a site"));
    Site& site = sites_[index];
    if (site.joins == 0 || epoch != site.info.epoch()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stream of site '", site_id, "' said hello with epoch ", epoch, "; ",
          site.joins == 0
              ? std::string("the site has not joined")
              : absl::StrCat("its current epoch is ", site.info.epoch(), ": join again")));
    }
    site.last_seen = now;
    if (channel == nullptr) return index;  // A push stream.
    if (site.channel != nullptr && site.channel != channel) {
      return absl::AlreadyExistsError(
          absl::StrCat("site '", site_id, "' already has an exchange stream for epoch ", epoch));
    }
    site.channel = channel;
    if (site.info.state() == v1::SITE_DOWN) site.info.set_state(v1::SITE_JOINED);
    // Neighbours may have (re)joined between this site's Join and its Hello: send their current
    // keys on the new stream so that no key update falls in between. Sites ignore keys they already
    // have.
    for (int neighbour : KeyPartners(spec_, index)) {
      if (sites_[neighbour].key)
        actions.push_back({channel, ControlMessage(*sites_[neighbour].key), {}});
    }
    MaybeStartLocked(actions);
  }
  Run(actions);
  return index;
}

void Federation::Detach(int site_index, const SiteChannel* channel, Clock::time_point now) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Site& site = sites_[site_index];
    if (site.channel.get() != channel) return;  // An older stream, already replaced.
    site.channel = nullptr;
    if (site.info.state() != v1::SITE_DONE) MarkDownLocked(site_index, "its stream ended", actions);
  }
  Run(actions);
}

void Federation::Touch(int site, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  sites_[site].last_seen = now;
}

void Federation::Report(int site_index, const v1::SiteReport& report, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  Site& site = sites_[site_index];
  site.last_seen = now;
  site.last_report = report;
  site.info.set_step(report.step());
  if (report.has_checkpoint()) site.info.set_checkpoint_step(report.checkpoint_step());
  if (site.info.state() == v1::SITE_JOINED) site.info.set_state(v1::SITE_TRAINING);
  // Time from a failed site's return to the first step trained after the rollback it caused.
  if (rejoined_at_ && !start_pending_ && report.generation() == generation_ &&
      report.step() > start_step_) {
    const double seconds = std::chrono::duration<double>(now - *rejoined_at_).count();
    AlertLocked(v1::Alert::INFO, absl::StrFormat("training resumed %.1f s after site %s rejoined",
                                                 seconds, rejoined_site_));
    spdlog::info("training resumed {:.1f} s after site {} rejoined", seconds, rejoined_site_);
    rejoined_at_.reset();
  }
  if (report.finished() && site.info.state() == v1::SITE_TRAINING) {
    site.info.set_state(v1::SITE_DONE);
    spdlog::info("site {} finished at step {}", site.info.id(), report.step());
    // Once every site is done, sites that join again start a new run (in a new generation, so
    // nothing of this run's mailbox can answer it).
    bool all_done = true;
    for (const Site& s : sites_) all_done &= s.info.state() == v1::SITE_DONE;
    if (all_done) {
      start_pending_ = true;
      spdlog::info("every site finished; sites that join again start a new run");
    }
  }
}

void Federation::CheckHeartbeats(Clock::time_point now) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto timeout = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(spec_.gateway.heartbeat_timeout_s));
    for (size_t i = 0; i < sites_.size(); ++i) {
      Site& site = sites_[i];
      const bool alive =
          site.info.state() == v1::SITE_JOINED || site.info.state() == v1::SITE_TRAINING;
      if (alive && now - site.last_seen > timeout) {
        MarkDownLocked(static_cast<int>(i),
                       absl::StrCat("silent for over ", spec_.gateway.heartbeat_timeout_s, " s"),
                       actions);
        if (site.channel != nullptr) {
          actions.push_back(
              {site.channel, std::nullopt,
               absl::UnavailableError("heartbeat timeout: the gateway heard nothing")});
          site.channel = nullptr;
        }
      }
    }
  }
  Run(actions);
}

void Federation::CountRejected(const std::string& reason, const std::string& detail) {
  spdlog::warn("rejected ({}): {}", reason, detail);
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_[reason];
}

namespace {
// Frames that count on a pipeline's (or a teacher's) link: not MOVE (between any two sites), SUM
// (a replica's share of a sum) or SERVE (serving; gateway/exchange/serving_gate.h counts requests).
bool OnALink(const v1::TensorKey& key) {
  return key.purpose() != v1::MOVE && key.purpose() != v1::SUM && key.purpose() != v1::SERVE;
}
}  // namespace

Federation::Link& Federation::LinkLocked(const v1::TensorKey& key) {
  return links_[{key.purpose() == v1::TEACH, key.replica(), key.boundary(),
                 static_cast<int>(key.direction())}];
}

void Federation::CountPushed(const v1::FrameHeader& header) {
  // Between two sites, on no boundary; or a replica's share of a sum (gateway/aggregate).
  if (!OnALink(header.key())) return;
  std::lock_guard<std::mutex> lock(mu_);
  Link& link = LinkLocked(header.key());
  ++link.frames;
  link.raw_bytes += header.raw_bytes();
  link.wire_bytes += header.wire_bytes();
}

void Federation::CountDelivered(const v1::FrameHeader& header, Clock::duration push_to_pull) {
  if (!OnALink(header.key())) return;
  std::lock_guard<std::mutex> lock(mu_);
  Link& link = LinkLocked(header.key());
  ++link.delivered;
  link.latency_ms_sum += std::chrono::duration<double, std::milli>(push_to_pull).count();
}

v1::FederationState Federation::Snapshot(const Mailbox::Stats& mailbox,
                                         Clock::time_point now) const {
  v1::FederationState state;
  std::lock_guard<std::mutex> lock(mu_);
  v1::FederationView& view = *state.mutable_view();
  view.set_federation(spec_.name);
  view.set_num_layers(spec_.model.NumLayers());
  view.set_generation(generation_);
  view.set_replicas(static_cast<uint32_t>(spec_.Replicas()));
  bool all_have_checkpoint = !sites_.empty();
  uint64_t common = UINT64_MAX;
  uint64_t rejected = 0;
  for (size_t slot = 0; slot < sites_.size(); ++slot) {
    const Site& site = sites_[slot];
    *view.add_sites() = site.info;
    v1::SiteMetrics& metrics = *state.add_sites();
    metrics.set_site_id(site.info.id());
    *metrics.mutable_last_report() = site.last_report;
    metrics.set_restarts(site.joins > 0 ? site.joins - 1 : 0);
    if (site.joins > 0) {
      metrics.set_last_seen_s_ago(std::chrono::duration<double>(now - site.last_seen).count());
    }
    rejected += site.last_report.rejected_frames();
    if (!CheckpointsCount(spec_, static_cast<int>(slot))) continue;
    all_have_checkpoint &= site.last_report.has_checkpoint() || site.info.checkpoint_step() > 0;
    common = std::min(common, site.info.checkpoint_step());
  }
  view.set_has_common_checkpoint(all_have_checkpoint);
  view.set_common_checkpoint_step(all_have_checkpoint ? common : 0);
  for (const auto& [where, link] : links_) {
    const auto& [teacher, replica, boundary, direction] = where;
    v1::LinkMetrics& m = *state.add_links();
    m.set_teacher(teacher);
    if (teacher && direction == v1::FORWARD &&
        boundary + 1 == static_cast<uint32_t>(spec_.TeacherStages())) {
      m.set_targets(link.frames * spec_.training.MicrobatchSize() *
                    static_cast<uint64_t>(spec_.model.TargetsPerSample()));
    }
    m.set_replica(replica);
    m.set_boundary(boundary);
    m.set_direction(static_cast<v1::Direction>(direction));
    m.set_frames(link.frames);
    m.set_raw_bytes(link.raw_bytes);
    m.set_wire_bytes(link.wire_bytes);
    if (auto held = mailbox.stored_by_link.find(where); held != mailbox.stored_by_link.end()) {
      m.set_queue_depth(static_cast<uint32_t>(held->second));
    }
    if (link.delivered > 0) m.set_mean_push_to_pull_ms(link.latency_ms_sum / link.delivered);
  }
  const uint64_t site_rejected = rejected;
  for (const auto& [reason, count] : rejected_) {
    (*state.mutable_rejected_by_reason())[reason] = count;
    rejected += count;
  }
  if (site_rejected > 0) (*state.mutable_rejected_by_reason())["site_rejected"] = site_rejected;
  state.set_rejected_frames(rejected);
  state.set_stored_bytes(mailbox.stored_bytes);
  state.set_memory_budget_bytes(mailbox.budget_bytes);
  state.set_waiting_pulls(mailbox.waiting_pulls);
  state.set_accounting_errors(mailbox.accounting_errors);
  for (const v1::Alert& alert : alerts_) *state.add_alerts() = alert;
  state.set_uptime_s(std::chrono::duration<double>(now - started_).count());
  state.set_unix_ms(UnixMs());
  return state;
}

absl::StatusOr<Federation::ServingEnds> Federation::Ends() const {
  std::lock_guard<std::mutex> lock(mu_);
  const Site& first = sites_.front();
  const Site& last = sites_[spec_.Stages() - 1];
  if (start_pending_ || generation_ == 0 || !first.key || !last.key) {
    return absl::FailedPreconditionError(
        "the federation has not started: every site must have joined (strait-site --serve)");
  }
  return ServingEnds{generation_, *first.key, *last.key};
}

void Federation::SendToStages(const v1::GatewayMessage& message) {
  std::vector<Action> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int stage = 0; stage < spec_.Stages(); ++stage) {
      if (sites_[stage].channel != nullptr) actions.push_back({sites_[stage].channel, message, {}});
    }
  }
  Run(actions);
}

void Federation::AlertLocked(v1::Alert::Severity severity, std::string message) {
  v1::Alert alert;
  alert.set_severity(severity);
  alert.set_message(std::move(message));
  alert.set_unix_ms(UnixMs());
  alerts_.push_back(std::move(alert));
  if (alerts_.size() > kMaxAlerts) alerts_.pop_front();
}

void Federation::MarkDownLocked(int index, const std::string& why, std::vector<Action>& actions) {
  Site& site = sites_[index];
  site.info.set_state(v1::SITE_DOWN);
  AlertLocked(v1::Alert::CRITICAL, absl::StrCat("site ", site.info.id(), " is down: ", why));
  spdlog::warn("site {} is down: {}", site.info.id(), why);
  if (site_down_)
    actions.push_back({nullptr, std::nullopt, {}, [this, index, why] { site_down_(index, why); }});
  for (size_t i = 0; i < sites_.size(); ++i) {
    if (static_cast<int>(i) != index && sites_[i].channel != nullptr) {
      actions.push_back({sites_[i].channel, SiteDownMessage(site.info.id()), {}});
    }
  }
  // Training cannot go on without it: the others stop and wait for the rollback that follows its
  // return. A site that finished the job leaves nothing to redo.
  bool finished = false;
  for (const Site& s : sites_) finished |= s.info.state() == v1::SITE_DONE;
  if (finished || start_pending_) return;
  start_pending_ = true;
  for (size_t i = 0; i < sites_.size(); ++i) {
    if (static_cast<int>(i) != index && sites_[i].channel != nullptr) {
      actions.push_back({sites_[i].channel,
                         PauseMessage(absl::StrCat("site ", site.info.id(), " is down: ", why)),
                         {}});
    }
  }
}

void Federation::MaybeStartLocked(std::vector<Action>& actions) {
  if (!start_pending_) return;
  uint64_t step = UINT64_MAX;
  for (size_t slot = 0; slot < sites_.size(); ++slot) {
    const Site& site = sites_[slot];
    if (site.channel == nullptr || site.info.state() == v1::SITE_DOWN) return;
    if (CheckpointsCount(spec_, static_cast<int>(slot))) {
      step = std::min(step, site.info.checkpoint_step());
    }
  }
  start_pending_ = false;
  start_step_ = step;
  const uint32_t generation = ++generation_;
  // A rollback makes the frames of earlier generations useless. (The first start has none to drop;
  // tools that exchange frames without training, such as benchmarks, use generation 0.)
  if (new_generation_ && generation > 1) {
    actions.push_back(
        {nullptr, std::nullopt, {}, [this, generation] { new_generation_(generation); }});
  }
  std::vector<LayerRange> split;  // Only a planned split (the student's) travels with it.
  for (int s = 0; spec_.SplitMayMove() && s < spec_.Stages(); ++s) {
    split.push_back({static_cast<int>(sites_[s].info.layers().start()),
                     static_cast<int>(sites_[s].info.layers().end())});
  }
  for (Site& site : sites_) {
    site.info.set_step(step);
    actions.push_back({site.channel, RollbackMessage(step, generation, split), {}});
  }
  if (generation > 1 || step > 0) {
    AlertLocked(v1::Alert::WARNING, absl::StrCat("rolled back to the checkpoint of step ", step,
                                                 " (generation ", generation, ")"));
  }
  spdlog::info("training {} at step {} (generation {})", generation == 1 ? "starts" : "restarts",
               step, generation);
}

absl::Status Federation::SetSplit(const std::vector<LayerRange>& split) {
  if (!spec_.SplitMayMove() || static_cast<int>(split.size()) != spec_.SiteSlots()) {
    return absl::FailedPreconditionError("only a planned split of every site can change");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t s = 0; s < split.size(); ++s) {
    sites_[s].info.mutable_layers()->set_start(split[s].start);
    sites_[s].info.mutable_layers()->set_end(split[s].end);
  }
  AlertLocked(v1::Alert::WARNING, absl::StrCat("split planned again: ", plan::SplitToString(split),
                                               "; layers move at the next rollback"));
  return absl::OkStatus();
}

void Federation::Run(std::vector<Action>& actions) {
  for (Action& action : actions) {
    if (action.call) {
      action.call();
      continue;
    }
    if (action.message) action.channel->Send(std::move(*action.message));
    if (!action.close.ok()) action.channel->Close(action.close);
  }
}

}  // namespace strait::gateway
