#include "site/daemon/rank_follower.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/job_agreement.h"
#include "core/status.h"
#include "site/collective/site_groups.h"
#include "site/daemon/rank_leader.h"
#include "site/daemon/rank_messages.h"
#include "site/daemon/site_session.h"
#include "site/daemon/stage_factory.h"
#include "site/pipeline/follower_stage.h"

namespace strait::site {
namespace {

// Errors with which the leader refuses a rank for good: attaching again would not help.
bool Refusal(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kPermissionDenied ||
         s.code() == absl::StatusCode::kUnauthenticated;
}

// One attachment: the group, the stages of its generations, the calls. OK after a finish; the
// error that ended the group otherwise.
absl::Status Serve(const FollowerOptions& o, LeaderLink& link, bool& grouped) {
  SiteGroups groups;
  std::string prefix;                    // Of the group's keys in the leader's store.
  std::unique_ptr<FollowerStage> stage;  // Destroyed before the group its reducers use.
  for (;;) {
    absl::StatusOr<v1::RankOrder> order = link.Next();
    if (!order.ok()) {
      stage.reset();
      return order.status();
    }
    absl::Status done;
    switch (order->kind_case()) {
      case v1::RankOrder::kGroup: {
        const v1::RankGroupOrder& g = order->group();
        stage.reset();
        const absl::StatusOr<std::chrono::milliseconds> timeout = GroupTimeout(g.timeout_s());
        if (!timeout.ok()) {  // The leader's mistake: answered with the value, never corrected.
          done = timeout.status();
          break;
        }
        const SiteSpec& site = o.spec->sites[o.index];
        absl::StatusOr<SiteGroups> made = ConnectSiteGroups(
            link.store(), g.prefix(),
            {.rank = o.rank, .machines = site.machines, .tensor_parallel = site.tensor_parallel},
            o.collective_host, *timeout);
        done = made.status();
        if (made.ok()) {
          groups = *std::move(made);
          prefix = g.prefix();
          grouped = true;
          spdlog::info("rank {}: in the site's group", o.rank);
        }
        break;
      }
      case v1::RankOrder::kBuild: {
        stage.reset();
        if (prefix.empty()) {
          done = absl::FailedPreconditionError("build before the group formed");
          break;
        }
        StageRanks ranks{.rank = o.rank,
                         .ranks = o.spec->sites[o.index].machines,
                         .group = groups.data.get(),
                         .tensor_parallel = o.spec->sites[o.index].tensor_parallel,
                         .tensor = groups.reducer.get(),
                         .store = &link.store(),
                         .nccl_prefix = BuildKeyPrefix(prefix, order->build().build())};
        absl::StatusOr<std::unique_ptr<FollowerStage>> made =
            MakeFollowerFactory(*o.spec, o.index, order->build().total_steps(), o.threads,
                                ranks)(o.view->Layers(o.index));
        done = made.status();
        if (made.ok()) stage = *std::move(made);
        break;
      }
      case v1::RankOrder::kCall: {
        absl::StatusOr<RankCall> call = FromOrder(order->call());
        if (!call.ok()) {
          done = call.status();
        } else if (stage == nullptr) {
          done = absl::FailedPreconditionError("a call before the stage was built");
        } else {
          STRAIT_RETURN_IF_ERROR(link.Answer(ToAnswer(stage->Serve(*call))));
          continue;
        }
        break;
      }
      case v1::RankOrder::kFinish:
        if (order->finish().error().empty()) return absl::OkStatus();
        return absl::AbortedError(absl::StrCat("the leader stopped: ", order->finish().error()));
      default:
        done = absl::InvalidArgumentError("an order of an unknown kind");
    }
    STRAIT_RETURN_IF_ERROR(link.Answer(StatusAnswer(done)));
  }
}

}  // namespace

absl::Status RunFollower(const FollowerOptions& o) {
  const SiteSpec& site = o.spec->sites[o.index];
  v1::RankHello hello;
  hello.set_site_id(o.view->SiteId(*o.spec, o.index));
  hello.set_rank(o.rank);
  hello.set_machines(site.machines);
  hello.set_job_text(AgreedJobText(*o.spec, o.view->planned));
  const auto patience =
      std::chrono::milliseconds(static_cast<int64_t>(o.reconnect_timeout_s * 1000));
  auto deadline = o.env->Now() + patience;
  auto next_notice = o.env->Now();
  for (;;) {
    absl::Status ended;
    bool grouped = false;
    absl::StatusOr<std::unique_ptr<LeaderLink>> link = AttachToLeader(o.leader, hello);
    if (link.ok()) {
      ended = Serve(o, **link, grouped);
      if (ended.ok()) {
        spdlog::info("rank {}: the leader finished the run", o.rank);
        return ended;
      }
      if (ended.code() == absl::StatusCode::kAborted) return ended;  // The leader stopped.
    } else {
      ended = link.status();
    }
    if (Refusal(ended)) return ended;
    const auto now = o.env->Now();
    if (grouped) {
      spdlog::warn("rank {}: the site's group ended ({}); attaching again", o.rank,
                   std::string(ended.message()));
      deadline = now + patience;
    } else if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat("rank ", o.rank, " gave up after ",
                                                 o.reconnect_timeout_s, " s: ", ended.message()));
    } else if (now >= next_notice) {
      spdlog::info("rank {}: waiting for the leader at {}: {}", o.rank, o.leader.address,
                   std::string(ended.message()));
      next_notice = now + std::chrono::seconds(10);
    }
    o.env->SleepFor(std::chrono::milliseconds(500));
  }
}

}  // namespace strait::site
