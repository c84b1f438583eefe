// RankPeers (site/pipeline/rank_call.h) for follower ranks in this process: each follower's
// FollowerStage serves the calls queued for it, in order, on a thread of its own. For the tests and
// benchmarks of a site of several ranks on one machine; strait-site's ranks are processes behind a
// gRPC stream (site/daemon/rank_leader.h).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "site/collective/gloo_group.h"
#include "site/collective/site_groups.h"
#include "site/pipeline/follower_stage.h"
#include "site/pipeline/rank_call.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

class LocalRankPeers final : public RankPeers {
 public:
  // followers[r - 1]: rank r's stage (not owned; must outlive this).
  explicit LocalRankPeers(std::vector<FollowerStage*> followers);
  ~LocalRankPeers() override;  // Joins the threads once their queued calls are served.

  int ranks() const override { return static_cast<int>(lanes_.size()) + 1; }
  absl::Status Send(int rank, RankCall call) override;
  absl::StatusOr<RankResult> Await(int rank) override;

 private:
  struct Lane {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<RankCall> calls;
    std::deque<absl::StatusOr<RankResult>> results;
    bool stop = false;
    std::thread thread;
  };
  static void Serve(Lane& lane, FollowerStage& stage);

  std::vector<std::unique_ptr<Lane>> lanes_;
};

// A whole site of `ranks` ranks in this process (tests, benchmarks): their Gloo groups over
// loopback TCP (site/collective/site_groups.h), each rank's stage of `workers` with the
// cross-rank reducer (the leader's StageExecutor, the followers' FollowerStages), and the
// leader's LocalRankPeers. Members are destroyed peers first, then the leader's stage, the
// followers', then groups.
struct LocalRankSite {
  std::vector<SiteGroups> groups;                         // Per rank.
  std::vector<std::unique_ptr<FollowerStage>> followers;  // followers[r - 1]: rank r's.
  std::unique_ptr<StageExecutor> leader_stage;
  std::unique_ptr<LocalRankPeers> peers;
  std::vector<AllReducer*> leader_reducers;  // The leader's, one per gradient arena.

  StageExecutor& leader() { return *leader_stage; }
  // Rank `rank`'s own part (its rows, its shards), rank >= 1.
  const StageExecutor& follower(int rank) const { return followers[rank - 1]->stage(); }

  // `workers`: each rank's, in a site of workers.ranks ranks with workers.tensor_parallel tensor
  // ranks per replica (each rank's own rank, peers, tensor reducer and make_reducer are set here).
  static absl::StatusOr<std::unique_ptr<LocalRankSite>> Create(
      const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
      WeightVersioning versioning, StageWorkers workers);
};

}  // namespace strait::site
