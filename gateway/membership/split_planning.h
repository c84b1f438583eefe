// The gateway's part of `layers: auto` (DESIGN.md §4, plan/split_planner.h): it collects every
// site's profile and link (the Plan call), plans the split once all are in, and answers every
// waiting site with it. A site that calls again (it restarted, or the gateway did and the sites
// reconnect) gets the same split, unless its profile's compute per step differs from the one the
// split was planned with by more than gateway.replan_share: then the split is planned again (with
// the same extra_in_flight), the caller gets the new one and OnReplan's handler hears of it (the
// federation's next Rollback moves the layers). Handler logic only; gateway/rpc/ wires it to gRPC.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "plan/site_profile.h"
#include "plan/split_planner.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class SplitPlanning {
 public:
  using Done = std::function<void(absl::StatusOr<v1::PlanReply>)>;

  // `spec` plans its split (JobSpec::PlansSplit) and must outlive this.
  explicit SplitPlanning(const JobSpec& spec);

  // Takes `site`'s request. `done` is called exactly once: at once with the plan if it exists or
  // with an error for a request that does not fit the job (another job, another model, a site the
  // spec does not have); else when the plan is made (possibly inside this call, when `site` is the
  // last) or when Forget(ticket) comes first. The returned ticket names the wait. Thread-safe;
  // `done` runs without the lock held.
  uint64_t Submit(const std::string& site, const v1::PlanRequest& request, Done done);
  // The call behind `ticket` ended first: its `done` gets CANCELLED unless it ran already.
  void Forget(uint64_t ticket);
  // Called (without the lock) with every split planned again after the first.
  void OnReplan(std::function<void(const std::vector<LayerRange>&)> handler);

  // Blocks until the plan is made or `stop` returns true (checked every 100 ms): the first plan's
  // choice (every range and extra_in_flight; the core serves plan/split_planner.h WithSplit of it
  // and WithPlannedInFlight), the planner's error when no split works, or CANCELLED when stopped.
  absl::StatusOr<plan::SplitChoice> WaitForPlan(const std::function<bool()>& stop);
  // The plan for people, or which sites it waits for.
  std::vector<std::string> Description() const;

 private:
  // Plans when every site's profile is in; the waiters to answer. Under mu_.
  std::vector<std::pair<Done, absl::StatusOr<v1::PlanReply>>> PlanIfComplete();
  // After the plan: takes `one` (a site's new profile and link) and plans again if the site's
  // compute changed by more than replan_share; the new split if it differs. Under mu_.
  std::optional<std::vector<LayerRange>> ReplanLocked(const plan::FederationProfile& one);
  // Makes reply_ and planned_ of a plan. Under mu_.
  void TakePlanLocked(const plan::SplitPlan& plan);

  const JobSpec& spec_;
  const std::string agreed_job_;
  mutable std::mutex mu_;
  std::condition_variable planned_cv_;
  plan::FederationProfile profiles_;      // Every site's newest.
  plan::FederationProfile planned_with_;  // What the current plan was made from.
  std::optional<v1::PlanReply> reply_;
  std::optional<plan::SplitChoice> planned_;  // The newest plan's; extra_in_flight the first's.
  absl::Status failed_;  // Planning itself failed (no split fits): every site gets this.
  std::map<uint64_t, Done> waiting_;
  uint64_t next_ticket_ = 1;
  std::function<void(const std::vector<LayerRange>&)> on_replan_;
};

}  // namespace strait::gateway
