#include "site/daemon/stage_factory.h"

#include <chrono>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/collective/all_reducer.h"
#include "site/pipeline/gradient_buckets.h"
#include "site/pipeline/local_teacher.h"

namespace strait::site {
namespace {

// The gradient reduction of a CUDA site of several ranks: NCCL over every rank's devices (rank r's
// device w is NCCL rank r * W + w), one clique per reduction, its unique id made by the leader and
// read by the others from the site's store.
ReducerMaker NcclAcrossRanks(const StageRanks& ranks) {
  auto made = std::make_shared<int>(0);  // Reductions made so far by this stage: the key's index.
  return [ranks, made](const std::vector<Backend*>& backends, std::vector<float*> arenas,
                       std::vector<Bucket> buckets) -> absl::StatusOr<std::unique_ptr<AllReducer>> {
    const int workers = static_cast<int>(backends.size());
    const std::string key = absl::StrCat(ranks.nccl_prefix, "nccl-id-", (*made)++);
    std::string id;
    if (ranks.rank == 0) {
      STRAIT_ASSIGN_OR_RETURN(id, NewNcclUniqueId());
      STRAIT_RETURN_IF_ERROR(ranks.store->Set(key, id));
    } else {
      STRAIT_ASSIGN_OR_RETURN(id, ranks.store->Get(key, std::chrono::seconds(120)));
    }
    std::vector<int> devices(workers);
    std::iota(devices.begin(), devices.end(), 0);
    const NcclClique clique{id, ranks.ranks * workers, ranks.rank * workers};
    return CreateNcclAllReducer(backends, devices, std::move(arenas), std::move(buckets), &clique);
  };
}

// MakeStageFactory, MakeFollowerFactory: `Made` is StageExecutor or FollowerStage.
template <class Made>
std::function<absl::StatusOr<std::unique_ptr<Made>>(LayerRange)> FactoryOf(
    const JobSpec& spec, int index, int64_t total_steps, int threads, StageRanks ranks) {
  const OptimizerSpec optimizer = WithDecayHorizon(spec.training.optimizer, total_steps);
  return [&spec, index, optimizer, threads,
          ranks](LayerRange layers) -> absl::StatusOr<std::unique_ptr<Made>> {
    const SiteSpec& site = spec.sites[index];
    StageWorkers workers{.device = site.device,
                         .count = site.workers,
                         .threads = threads,
                         .precision = spec.training.precision,
                         .rank = ranks.rank,
                         .ranks = ranks.ranks,
                         .peers = ranks.peers,
                         .tensor_parallel = ranks.tensor_parallel,
                         .tensor_reducer = ranks.tensor};
    if (ranks.ranks > 1 && site.device == DeviceKind::kCpu) {
      GlooGroup* group = ranks.group;
      workers.make_reducer =
          [group](const std::vector<Backend*>& backends, std::vector<float*> arenas,
                  std::vector<Bucket> buckets) -> absl::StatusOr<std::unique_ptr<AllReducer>> {
        // One replica (tensor parallelism alone): a rank's gradient is its own shard's.
        if (group == nullptr) return InProcessReducer(DeviceKind::kCpu)(backends, arenas, buckets);
        return CreateCrossRankCpuReducer(std::move(arenas), std::move(buckets), group);
      };
    } else if (ranks.ranks > 1) {
      workers.make_reducer = NcclAcrossRanks(ranks);
    }
    return Made::Create(spec.model, layers, optimizer, spec.training.MicrobatchSize(),
                        VersioningOf(spec.training), workers);
  };
}

}  // namespace

StageFactory MakeStageFactory(const JobSpec& spec, int index, int64_t total_steps, int threads,
                              StageRanks ranks) {
  return FactoryOf<StageExecutor>(spec, index, total_steps, threads, ranks);
}

StageFactory MakeTeacherStageFactory(const JobSpec& spec, int teacher_stage, int threads) {
  return [&spec, teacher_stage, threads](LayerRange layers) {
    const SiteSpec& site = spec.teacher.sites[teacher_stage];
    return LoadTeacherStage(spec, layers, spec.training.MicrobatchSize(),
                            {.device = site.device,
                             .count = site.workers,
                             .threads = threads,
                             .precision = spec.training.precision});
  };
}

FollowerFactory MakeFollowerFactory(const JobSpec& spec, int index, int64_t total_steps,
                                    int threads, StageRanks ranks) {
  return FactoryOf<FollowerStage>(spec, index, total_steps, threads, ranks);
}

}  // namespace strait::site
