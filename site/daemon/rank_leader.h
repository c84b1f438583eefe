// The leader (rank 0) of a site of several machines (DESIGN.md §4): admits the site's follower
// ranks (site/rpc/rank_server.h checks their certificates; this checks rank, layout and job spec),
// forms their collective group (Gloo over TCP, rendezvous through the store it holds), has them
// build a stage for every rollback generation, and is the leader StageExecutor's RankPeers.
//
// Failure = site failure: a follower that is gone, answers with an error, or does not answer
// within the site's heartbeat timeout fails the group; every later call fails, the site leaves the
// gateway (which rolls the federation back) and the leader forms the group again from the ranks
// that attach next (a restarted rank, or the survivors attaching again).
//
// FormGroup, BuildFollowers, EndGroup and the RankPeers calls are for the site's training thread;
// the RankAdmission calls come from the server's threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "site/collective/gloo_group.h"
#include "site/collective/rendezvous_store.h"
#include "site/collective/site_groups.h"
#include "site/pipeline/rank_call.h"
#include "site/rpc/rank_link.h"
#include "site/rpc/rank_server.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

// The keys of build `build` of the group whose keys start with `group_prefix`.
std::string BuildKeyPrefix(const std::string& group_prefix, uint32_t build);

class RankLeader final : public RankAdmission, public RankPeers {
 public:
  struct Options {
    const JobSpec* spec = nullptr;  // Must outlive the leader.
    const JobView* view = nullptr;  // The site's replica and split as it started; must outlive it.
    int index = 0;                  // The site's stage.
    std::string listen;             // host:port the followers dial (strait-site --leader).
    crypto::TlsMaterial tls;        // The site's certificate and key, and the federation CA.
    crypto::DenyList deny_list;
    std::string collective_host = "127.0.0.1";  // Where this rank's Gloo connections bind.
  };
  // Starts listening for the followers.
  static absl::StatusOr<std::unique_ptr<RankLeader>> Start(Options options);
  ~RankLeader() override;

  int port() const { return server_->port(); }

  // Waits until every follower rank has attached (saying every 10 s which are missing; at most
  // `wait`), then forms the collective group of all ranks.
  absl::Status FormGroup(std::chrono::milliseconds wait);
  // The group's data-parallel Gloo group (null with one replica) and tensor reducer (null without
  // tensor parallelism).
  GlooGroup* group() const { return groups_.data.get(); }
  TensorReducer* tensor_reducer() const { return groups_.reducer.get(); }
  // Every follower builds a fresh stage for a run of `total_steps` (a generation begins; the
  // leader's own is built by the caller, with this as its peers). Returns the prefix of this
  // build's keys in store() (NcclKeyPrefix).
  absl::StatusOr<std::string> BuildFollowers(int64_t total_steps);
  // Whether the group has failed, and why.
  absl::Status failure() const;
  // Every rank as the leader sees it, for the site's reports (the dashboard). Thread-safe.
  std::vector<v1::RankStatus> RankStates() const;
  // Ends the group. After a rank failure (`regroup`) the followers' streams end and they attach
  // again; otherwise they are told the run is over (`outcome`: OK, or why the leader stops) and
  // exit. Destroy every stage built on group() first.
  void EndGroup(bool regroup, const absl::Status& outcome = absl::OkStatus());

  // RankAdmission.
  absl::Status Admit(const v1::RankHello& hello, const std::string& certified_site) override;
  void Attached(int rank, std::shared_ptr<FollowerLink> link, const std::string& peer) override;
  RendezvousStore& store() override { return store_; }

  // RankPeers.
  int ranks() const override { return machines_; }
  absl::Status Send(int rank, RankCall call) override;
  absl::StatusOr<RankResult> Await(int rank) override;

 private:
  explicit RankLeader(Options options);
  // Sends `order` to every follower and waits for their answers (at most `timeout` each).
  absl::Status Broadcast(const v1::RankOrder& order, std::chrono::milliseconds timeout);
  absl::Status Fail(absl::Status status);  // Records the group's first failure; returns it.
  std::shared_ptr<FollowerLink> Link(int rank);

  const Options options_;
  const int machines_;
  const std::string job_text_;
  const std::chrono::milliseconds call_timeout_;  // The site's heartbeat timeout.
  MemoryRendezvousStore store_;
  std::unique_ptr<RankServer> server_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::shared_ptr<FollowerLink>> links_;  // Attached followers, by rank.
  std::map<int, std::string> peers_;                    // Their addresses.
  bool grouped_ = false;  // A group is formed (attaching is refused until it ends).
  absl::Status failure_;
  int generation_ = 0;   // Of the group: its keys' prefix in the store.
  uint32_t builds_ = 0;  // Stages built in this group.
  SiteGroups groups_;
};

}  // namespace strait::site
