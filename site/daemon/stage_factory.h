// How a site makes its stage (DESIGN.md §4): the device, workers and optimizer of its spec, and,
// for a site of several machines, the gradient reduction across its ranks (Gloo on CPU, an NCCL
// clique per reduction on CUDA). The session builds every generation's stage through a
// StageFactory; a follower rank builds the matching FollowerStage through a FollowerFactory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/collective/gloo_group.h"
#include "site/collective/rendezvous_store.h"
#include "site/pipeline/follower_stage.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

// Builds this site's stage of `layers` with its initial parameters (every generation starts from a
// fresh one, then loads its checkpoint; a planned split may give it other layers). The session's
// only way to make a stage.
using StageFactory =
    std::function<absl::StatusOr<std::unique_ptr<StageExecutor>>(LayerRange layers)>;

// Where this process sits in its site (DESIGN.md §4): rank `rank` of the site's `ranks` machines.
struct StageRanks {
  int rank = 0;
  int ranks = 1;
  RankPeers* peers = nullptr;  // The leader of several ranks: its followers.
  GlooGroup* group = nullptr;  // Several CPU replicas: the data-parallel group of this rank.
  int tensor_parallel = 1;     // Tensor ranks per replica; `tensor` sums between them.
  TensorReducer* tensor = nullptr;
  // Several CUDA ranks: the site's rendezvous store and this build's prefix of keys in it, under
  // which the leader hands out one NCCL unique id per gradient reduction.
  RendezvousStore* store = nullptr;
  std::string nccl_prefix;
};

// The stage of site `index` of `spec` (its device and workers) for a run of `total_steps`
// (the horizon of the optimizer's decay), with `threads` compute threads per worker, as rank
// `ranks` of its site (its gradients summed across the ranks' group). `spec` and the peers and
// group must outlive the factory's stages.
StageFactory MakeStageFactory(const JobSpec& spec, int index, int64_t total_steps, int threads,
                              StageRanks ranks = {});

// A teacher site's stage (knowledge sharing): `layers` of teacher stage `teacher_stage` of `spec`
// (its device and workers), forward only, with the weights of teacher.checkpoint
// (LoadTeacherStage).
StageFactory MakeTeacherStageFactory(const JobSpec& spec, int teacher_stage, int threads);

// The same stage for a follower rank (ranks.rank >= 1), which serves its leader's calls
// (site/daemon/rank_follower.h).
using FollowerFactory =
    std::function<absl::StatusOr<std::unique_ptr<FollowerStage>>(LayerRange layers)>;
FollowerFactory MakeFollowerFactory(const JobSpec& spec, int index, int64_t total_steps,
                                    int threads, StageRanks ranks);

}  // namespace strait::site
