#include "gateway/membership/split_planning.h"

#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/job_agreement.h"
#include "spdlog/spdlog.h"

namespace strait::gateway {

SplitPlanning::SplitPlanning(const JobSpec& spec) : spec_(spec), agreed_job_(AgreedJobText(spec)) {}

uint64_t SplitPlanning::Submit(const std::string& site, const v1::PlanRequest& request, Done done) {
  auto refuse = [&](absl::Status status) {
    done(std::move(status));
    return uint64_t{0};
  };
  if (spec_.SiteIndex(site) < 0) {
    return refuse(absl::PermissionDeniedError(
        absl::StrCat("site '", site, "' is not in the job spec of federation ", spec_.name)));
  }
  if (!request.agreed_job().empty() && request.agreed_job() != agreed_job_) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("site '", site, "' runs another job spec than the gateway: ",
                     FirstDisagreement(agreed_job_, request.agreed_job(), "gateway"))));
  }
  absl::StatusOr<plan::SiteProfile> profile = plan::FromProto(request.profile(), site);
  if (!profile.ok()) return refuse(profile.status());
  plan::FederationProfile one{.sites = {*profile}};
  const plan::MeasuredLink link{.site = site,
                                .round_trip_s = request.round_trip_s(),
                                .bytes_per_second = request.bytes_per_second()};
  if (absl::Status s = plan::CheckMeasuredLink(link); !s.ok()) return refuse(s);
  if (link.round_trip_s > 0 || link.bytes_per_second > 0) one.links.push_back(link);
  const std::string model = plan::ProfiledModel(spec_);
  if (profile->model != model ||
      static_cast<int>(profile->layers.size()) != spec_.model.NumLayers()) {
    return refuse(absl::FailedPreconditionError(
        absl::StrCat("site '", site, "' sent a profile of another model (", profile->model, ", ",
                     profile->layers.size(), " layers; this job's is ", model,
                     "): restart it with --profile-again to measure this one")));
  }
  std::vector<std::pair<Done, absl::StatusOr<v1::PlanReply>>> answers;
  uint64_t ticket = 0;
  std::optional<std::vector<LayerRange>> replanned;
  std::function<void(const std::vector<LayerRange>&)> on_replan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reply_) replanned = ReplanLocked(one);
    on_replan = on_replan_;
    if (reply_ || !failed_.ok()) {
      answers.emplace_back(std::move(done), reply_ ? absl::StatusOr<v1::PlanReply>(*reply_)
                                                   : absl::StatusOr<v1::PlanReply>(failed_));
    } else {
      plan::MergeFederationProfile(one, &profiles_);
      ticket = next_ticket_++;
      waiting_[ticket] = std::move(done);
      answers = PlanIfComplete();
    }
  }
  if (replanned && on_replan) on_replan(*replanned);
  for (auto& [callback, answer] : answers) callback(std::move(answer));
  return ticket;
}

void SplitPlanning::OnReplan(std::function<void(const std::vector<LayerRange>&)> handler) {
  std::lock_guard<std::mutex> lock(mu_);
  on_replan_ = std::move(handler);
}

std::optional<std::vector<LayerRange>> SplitPlanning::ReplanLocked(
    const plan::FederationProfile& one) {
  const plan::SiteProfile& now = one.sites.front();
  const plan::SiteProfile* before = planned_with_.Site(now.site);
  const int microbatches = spec_.training.microbatches;
  const double was = before ? plan::ComputeSecondsPerStep(*before, microbatches) : 0;
  const double is = plan::ComputeSecondsPerStep(now, microbatches);
  plan::MergeFederationProfile(one, &profiles_);
  if (was > 0 && std::abs(is / was - 1) <= spec_.gateway.replan_share) return std::nullopt;
  spdlog::info(
      "site {} computes {:.1f} ms per step, the split was planned with {:.1f} ms: "
      "planning it again",
      now.site, is * 1e3, was * 1e3);
  // The sites keep the extra_in_flight they run with; only the layers move.
  const JobSpec fixed = plan::WithPlannedInFlight(spec_, *planned_);
  absl::StatusOr<plan::SplitPlan> plan = plan::PlanSplit(fixed, profiles_);
  if (!plan.ok()) {
    spdlog::error("cannot plan the split again ({}); keeping {}",
                  std::string(plan.status().message()), plan::SplitToString(planned_->layers));
    return std::nullopt;
  }
  const std::vector<LayerRange> split = plan->ranked.front().choice.layers;
  if (split == planned_->layers) {
    spdlog::info("plan: the split {} stays the best", plan::SplitToString(split));
    planned_with_ = profiles_;
    return std::nullopt;
  }
  TakePlanLocked(*plan);
  return split;
}

void SplitPlanning::TakePlanLocked(const plan::SplitPlan& plan) {
  const plan::SplitChoice& choice = plan.ranked.front().choice;
  v1::PlanReply reply;
  for (const LayerRange& r : choice.layers) {
    v1::LayerRange* range = reply.add_layers();
    range->set_start(r.start);
    range->set_end(r.end);
  }
  reply.set_extra_in_flight(choice.extra_in_flight);
  for (const std::string& line : plan::DescribePlan(spec_, plan)) {
    spdlog::info("plan: {}", line);
    reply.add_description(line);
  }
  reply_ = std::move(reply);
  planned_ = choice;
  planned_with_ = profiles_;
}

void SplitPlanning::Forget(uint64_t ticket) {
  Done done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiting_.find(ticket);
    if (it == waiting_.end()) return;
    done = std::move(it->second);
    waiting_.erase(it);
  }
  done(absl::CancelledError("the Plan call ended before the plan was made"));
}

std::vector<std::pair<SplitPlanning::Done, absl::StatusOr<v1::PlanReply>>>
SplitPlanning::PlanIfComplete() {
  for (const SiteSpec& site : spec_.sites) {
    if (profiles_.Site(site.id) == nullptr) return {};
  }
  absl::StatusOr<plan::SplitPlan> plan = plan::PlanSplit(spec_, profiles_);
  if (plan.ok()) {
    TakePlanLocked(*plan);
  } else {
    failed_ = plan.status();
    spdlog::error("cannot plan the split: {}", std::string(failed_.message()));
  }
  planned_cv_.notify_all();
  std::vector<std::pair<Done, absl::StatusOr<v1::PlanReply>>> answers;
  for (auto& [ticket, done] : waiting_) {
    answers.emplace_back(std::move(done), reply_ ? absl::StatusOr<v1::PlanReply>(*reply_)
                                                 : absl::StatusOr<v1::PlanReply>(failed_));
  }
  waiting_.clear();
  return answers;
}

absl::StatusOr<plan::SplitChoice> SplitPlanning::WaitForPlan(const std::function<bool()>& stop) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!planned_ && failed_.ok() && !stop()) {
    planned_cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (planned_) return *planned_;
  if (!failed_.ok()) return failed_;
  return absl::CancelledError("stopped before the split was planned");
}

std::vector<std::string> SplitPlanning::Description() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (reply_) return {reply_->description().begin(), reply_->description().end()};
  if (!failed_.ok()) return {"cannot plan the split: " + std::string(failed_.message())};
  std::vector<std::string> missing;
  for (const SiteSpec& site : spec_.sites) {
    if (profiles_.Site(site.id) == nullptr) missing.push_back(site.id);
  }
  return {"planning the split: waiting for the profiles of " + absl::StrJoin(missing, ", ")};
}

}  // namespace strait::gateway
