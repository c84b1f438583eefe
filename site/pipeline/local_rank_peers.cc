#include "site/pipeline/local_rank_peers.h"

#include <utility>

#include "core/status.h"

namespace strait::site {

LocalRankPeers::LocalRankPeers(std::vector<FollowerStage*> followers) {
  for (FollowerStage* stage : followers) {
    lanes_.push_back(std::make_unique<Lane>());
    Lane* lane = lanes_.back().get();
    lane->thread = std::thread([lane, stage] { Serve(*lane, *stage); });
  }
}

LocalRankPeers::~LocalRankPeers() {
  for (auto& lane : lanes_) {
    {
      std::lock_guard<std::mutex> lock(lane->mu);
      lane->stop = true;
      lane->cv.notify_all();
    }
    lane->thread.join();
  }
}

void LocalRankPeers::Serve(Lane& lane, FollowerStage& stage) {
  std::unique_lock<std::mutex> lock(lane.mu);
  for (;;) {
    lane.cv.wait(lock, [&] { return lane.stop || !lane.calls.empty(); });
    if (lane.calls.empty()) return;
    RankCall call = std::move(lane.calls.front());
    lane.calls.pop_front();
    lock.unlock();
    absl::StatusOr<RankResult> result = stage.Serve(call);
    lock.lock();
    lane.results.push_back(std::move(result));
    lane.cv.notify_all();
  }
}

absl::Status LocalRankPeers::Send(int rank, RankCall call) {
  Lane& lane = *lanes_.at(rank - 1);
  std::lock_guard<std::mutex> lock(lane.mu);
  lane.calls.push_back(std::move(call));
  lane.cv.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<RankResult> LocalRankPeers::Await(int rank) {
  Lane& lane = *lanes_.at(rank - 1);
  std::unique_lock<std::mutex> lock(lane.mu);
  lane.cv.wait(lock, [&] { return !lane.results.empty(); });
  absl::StatusOr<RankResult> result = std::move(lane.results.front());
  lane.results.pop_front();
  return result;
}

absl::StatusOr<std::unique_ptr<LocalRankSite>> LocalRankSite::Create(
    const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
    WeightVersioning versioning, StageWorkers workers) {
  const int ranks = workers.ranks, tensor_parallel = workers.tensor_parallel;
  auto site = std::make_unique<LocalRankSite>();
  const int replicas = ranks / tensor_parallel;
  site->groups.resize(ranks);
  for (int dp = 0; dp < replicas && tensor_parallel > 1; ++dp) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<GlooGroup>> tensor,
                            GlooGroup::ConnectInProcess(tensor_parallel));
    for (int tp = 0; tp < tensor_parallel; ++tp) {
      SiteGroups& g = site->groups[dp * tensor_parallel + tp];
      g.tensor = std::move(tensor[tp]);
      g.reducer = std::make_unique<GlooTensorReducer>(g.tensor.get());
    }
  }
  for (int tp = 0; tp < tensor_parallel && replicas > 1; ++tp) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<GlooGroup>> data,
                            GlooGroup::ConnectInProcess(replicas));
    for (int dp = 0; dp < replicas; ++dp) {
      site->groups[dp * tensor_parallel + tp].data = std::move(data[dp]);
    }
  }
  site->followers.resize(ranks - 1);
  std::vector<FollowerStage*> followers;
  for (int r = ranks; r-- > 0;) {  // Followers first: the leader's peers point at them.
    StageWorkers w = workers;
    w.rank = r;
    w.ranks = ranks;
    w.tensor_parallel = tensor_parallel;
    w.tensor_reducer = site->groups[r].reducer.get();
    GlooGroup* group = site->groups[r].data.get();
    std::vector<AllReducer*>* made = r == 0 ? &site->leader_reducers : nullptr;
    w.make_reducer =
        [group, made](const std::vector<Backend*>& backends, std::vector<float*> arenas,
                      std::vector<Bucket> buckets) -> absl::StatusOr<std::unique_ptr<AllReducer>> {
      if (group == nullptr) return InProcessReducer(DeviceKind::kCpu)(backends, arenas, buckets);
      STRAIT_ASSIGN_OR_RETURN(
          std::unique_ptr<AllReducer> reducer,
          CreateCrossRankCpuReducer(std::move(arenas), std::move(buckets), group));
      if (made != nullptr) made->push_back(reducer.get());
      return reducer;
    };
    if (r == 0 && ranks > 1) {
      site->peers = std::make_unique<LocalRankPeers>(followers);
      w.peers = site->peers.get();
    }
    if (r > 0) {
      STRAIT_ASSIGN_OR_RETURN(
          site->followers[r - 1],
          FollowerStage::Create(model, range, optimizer, max_batch, versioning, w));
      followers.insert(followers.begin(), site->followers[r - 1].get());
    } else {
      STRAIT_ASSIGN_OR_RETURN(site->leader_stage, StageExecutor::Create(model, range, optimizer,
                                                                        max_batch, versioning, w));
    }
  }
  return site;
}

}  // namespace strait::site
