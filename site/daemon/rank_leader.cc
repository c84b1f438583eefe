#include "site/daemon/rank_leader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/job_agreement.h"
#include "core/status.h"
#include "site/daemon/rank_messages.h"

namespace strait::site {
namespace {

// Building a stage or forming the group may take longer than a call of a step.
constexpr std::chrono::milliseconds kSetupTimeout = std::chrono::seconds(120);

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// The group's rendezvous and collective timeout: the site's heartbeat timeout, at least 1 s
// (kMinGroupTimeoutS; a heartbeat timeout may be shorter, a rendezvous needs that long).
double GroupTimeoutSeconds(const JobSpec& spec) {
  return std::max(spec.gateway.heartbeat_timeout_s, kMinGroupTimeoutS);
}

}  // namespace

RankLeader::RankLeader(Options options)
    : options_(std::move(options)),
      machines_(options_.spec->sites[options_.index].machines),
      job_text_(AgreedJobText(*options_.spec, options_.view->planned)),
      call_timeout_(Millis(options_.spec->gateway.heartbeat_timeout_s)) {}

RankLeader::~RankLeader() {
  EndGroup(/*regroup=*/false, absl::AbortedError("the leader stopped"));
  server_.reset();
}

absl::StatusOr<std::unique_ptr<RankLeader>> RankLeader::Start(Options options) {
  // A timeout the followers would refuse stops the site here, before any rank waits for it.
  if (absl::StatusOr<std::chrono::milliseconds> timeout =
          GroupTimeout(GroupTimeoutSeconds(*options.spec));
      !timeout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gateway.heartbeat_timeout times out the group of a site of several "
                     "machines: ",
                     timeout.status().message()));
  }
  std::unique_ptr<RankLeader> leader(new RankLeader(std::move(options)));
  const Options& o = leader->options_;
  STRAIT_ASSIGN_OR_RETURN(leader->server_,
                          RankServer::Start({.listen = o.listen,
                                             .site_id = o.view->SiteId(*o.spec, o.index),
                                             .tls = o.tls,
                                             .deny_list = o.deny_list},
                                            *leader));
  return leader;
}

absl::Status RankLeader::Admit(const v1::RankHello& hello, const std::string& certified_site) {
  if (hello.site_id() != certified_site) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a rank of site '", certified_site, "' says it is of site '", hello.site_id(), "'"));
  }
  if (hello.machines() != static_cast<uint32_t>(machines_)) {
    return absl::InvalidArgumentError(absl::StrCat("the rank's job spec gives site '",
                                                   certified_site, "' ", hello.machines(),
                                                   " machines; the leader's gives ", machines_,
                                                   " (start every rank with the "
                                                   "same file)"));
  }
  if (hello.rank() < 1 || hello.rank() >= static_cast<uint32_t>(machines_)) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", hello.rank(), " of a site of ",
                                                   machines_, " machines: ranks are 1 to ",
                                                   machines_ - 1, " (0 is the leader)"));
  }
  if (hello.job_text() != job_text_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", hello.rank(), "'s job spec differs from the leader's: ",
                     FirstDisagreement(job_text_, hello.job_text(), "leader")));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (grouped_) {
    return absl::UnavailableError(
        "the site's group is running; a rank attaches when the group forms again");
  }
  auto old = links_.find(static_cast<int>(hello.rank()));
  if (old != links_.end() && !old->second->gone()) {
    return absl::UnavailableError(absl::StrCat("rank ", hello.rank(), " is attached already"));
  }
  // A rank that died while the group was forming comes back: its new link replaces the old.
  if (old != links_.end()) links_.erase(old);
  return absl::OkStatus();
}

void RankLeader::Attached(int rank, std::shared_ptr<FollowerLink> link, const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  links_[rank] = std::move(link);
  peers_[rank] = peer;
  spdlog::info("rank {} attached ({} of {} followers)", rank, links_.size(), machines_ - 1);
  cv_.notify_all();
}

absl::Status RankLeader::FormGroup(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      std::vector<std::string> missing;  // Ranks without a live link.
      for (int r = 1; r < machines_; ++r) {
        auto it = links_.find(r);
        if (it == links_.end() || it->second->gone()) missing.push_back(absl::StrCat(r));
      }
      if (missing.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("rank(s) ", absl::StrJoin(missing, ", "), " of site '",
                         options_.view->SiteId(*options_.spec, options_.index),
                         "' did not attach to the leader at ", options_.listen, " in time"));
      }
      spdlog::info("waiting for rank(s) {} to attach at {}", absl::StrJoin(missing, ", "),
                   options_.listen);
      cv_.wait_until(
          lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(10)));
    }
    grouped_ = true;
    failure_ = absl::OkStatus();
    ++generation_;
    builds_ = 0;
  }
  const std::string prefix = absl::StrCat("group-", generation_, "/");
  const std::chrono::milliseconds timeout = *GroupTimeout(GroupTimeoutSeconds(*options_.spec));
  v1::RankOrder order;
  order.mutable_group()->set_prefix(prefix);
  order.mutable_group()->set_timeout_s(timeout.count() / 1000.0);
  for (int r = 1; r < machines_; ++r) STRAIT_RETURN_IF_ERROR(Fail(Link(r)->Send(order)));
  absl::StatusOr<SiteGroups> groups =
      ConnectSiteGroups(store_, prefix,
                        {.rank = 0,
                         .machines = machines_,
                         .tensor_parallel = options_.spec->sites[options_.index].tensor_parallel},
                        options_.collective_host, timeout);
  absl::Status status = groups.status();
  for (int r = 1; r < machines_; ++r) {
    absl::StatusOr<v1::RankAnswer> answer = Link(r)->Receive(kSetupTimeout);
    status.Update(answer.ok() ? AnswerStatus(*answer) : answer.status());
  }
  if (!status.ok()) return Fail(status);
  groups_ = *std::move(groups);
  spdlog::info("site group {} formed: {} ranks", generation_, machines_);
  return absl::OkStatus();
}

std::string BuildKeyPrefix(const std::string& group_prefix, uint32_t build) {
  return absl::StrCat(group_prefix, "build-", build, "/");
}

absl::StatusOr<std::string> RankLeader::BuildFollowers(int64_t total_steps) {
  v1::RankOrder order;
  order.mutable_build()->set_total_steps(total_steps);
  order.mutable_build()->set_build(++builds_);
  STRAIT_RETURN_IF_ERROR(Broadcast(order, kSetupTimeout));
  return BuildKeyPrefix(absl::StrCat("group-", generation_, "/"), builds_);
}

absl::Status RankLeader::Broadcast(const v1::RankOrder& order, std::chrono::milliseconds timeout) {
  STRAIT_RETURN_IF_ERROR(failure());
  for (int r = 1; r < machines_; ++r) STRAIT_RETURN_IF_ERROR(Fail(Link(r)->Send(order)));
  absl::Status status;
  for (int r = 1; r < machines_; ++r) {
    absl::StatusOr<v1::RankAnswer> answer = Link(r)->Receive(timeout);
    status.Update(answer.ok() ? AnswerStatus(*answer) : answer.status());
  }
  return Fail(status);
}

absl::Status RankLeader::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!grouped_) return absl::FailedPreconditionError("the site's group is not formed");
  return failure_;
}

absl::Status RankLeader::Fail(absl::Status status) {
  if (status.ok()) return status;
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.ok()) {
    failure_ = absl::UnavailableError(
        absl::StrCat("site '", options_.view->SiteId(*options_.spec, options_.index),
                     "' failed: ", status.message()));
    spdlog::error("{}", std::string(failure_.message()));
  }
  return failure_;
}

std::vector<v1::RankStatus> RankLeader::RankStates() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::RankStatus> states(machines_);
  for (int r = 0; r < machines_; ++r) {
    states[r].set_rank(r);
    if (r == 0) {
      states[r].set_state("leader");
      states[r].set_peer(options_.listen);
    } else if (links_.count(r) == 0) {
      states[r].set_state("absent");
    } else {
      states[r].set_state(failure_.ok() ? "training" : "failed");
      states[r].set_peer(peers_.at(r));
    }
  }
  return states;
}

std::shared_ptr<FollowerLink> RankLeader::Link(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return links_.at(rank);
}

void RankLeader::EndGroup(bool regroup, const absl::Status& outcome) {
  std::map<int, std::shared_ptr<FollowerLink>> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    links.swap(links_);
  }
  for (auto& [rank, link] : links) {
    if (!regroup) {
      v1::RankOrder order;
      order.mutable_finish()->set_error(std::string(outcome.message()));
      link->Send(order).IgnoreError();
    }
    link->Close();
  }
  groups_ = SiteGroups();
  store_.EraseWithPrefix(absl::StrCat("group-", generation_, "/"));
  std::lock_guard<std::mutex> lock(mu_);
  grouped_ = false;
}

absl::Status RankLeader::Send(int rank, RankCall call) {
  STRAIT_RETURN_IF_ERROR(failure());
  v1::RankOrder order;
  *order.mutable_call() = ToOrder(call);
  return Fail(Link(rank)->Send(std::move(order)));
}

absl::StatusOr<RankResult> RankLeader::Await(int rank) {
  absl::StatusOr<v1::RankAnswer> answer = Link(rank)->Receive(call_timeout_);
  if (!answer.ok()) return Fail(answer.status());
  absl::StatusOr<RankResult> result = FromAnswer(*answer);
  if (!result.ok()) {
    return Fail(absl::Status(result.status().code(),
                             absl::StrCat("rank ", rank, ": ", result.status().message())));
  }
  return result;
}

}  // namespace strait::site
