// The weight versions of one worker's stage (DESIGN.md §3: weight versions belong to the
// schedule, not to the layers): the parameter arenas, which version each holds, the update that
// makes the next version, and the gradient arenas the versions' microbatches add into.
//
// Let L_k be the weights after k updates (L_0 the initial ones), and g_t the gradient of step t.
//
// One version (schedules 1f1b and gpipe): one weight arena, L_k, and one gradient arena. Step t
// computes with L_t and the update L_{t+1} = Opt(L_t, clip(g_t)) happens after a flush.
//
// Two versions (2bw, PipeDream-2BW): step t computes g_t with L_{max(t-1, 0)}
// (core/schedule.h ForwardWeights) and the update of g_t applies to the newest weights:
// L_{t+1} = Opt(L_t, clip(g_t)), the optimizer's step counter t + 1. So step t+1's microbatches
// can run (with L_t) while g_t's clipping norm travels between the sites. The history holds the
// newest L_k and the previous L_{k-1}, and two gradient arenas (the gradient of step t in arena
// t % 2). Update keeps L_k as the previous version before it makes L_{k+1}.
//
// Two versions with lookahead c > 0: microbatches of version k compute with weights extrapolated
// along the last update, P_k = L_k + c (L_k - L_{k-1}) (P_0 = L_0), instead of L_k: a one-step-
// stale gradient taken where the weights are headed is nearer the fresh one than a gradient at
// L_{k-1} (docs/config.md "Schedules" has the measurements). The history then keeps the newest
// L_k (which updates apply to) and P_k, P_{k-1} for the microbatches in flight: three weight
// arenas. The update that makes L_{k+1} writes P_{k+1} over P_{k-1}, once per update.
//
// Dropping stale gradients (2bw with update eager and training.stale_gradients drop): a microbatch
// of step t that computes with L_{t-1} (a stage's warm-up under eager updates) adds its parameter
// gradients to the arena of step t - 1 instead of t's. Under eager updates that arena was applied
// before the microbatch's backward pass and is zeroed before step t + 1 uses it, so those
// gradients never reach the optimizer; only the step's microbatches computed with the newest
// weights make its gradient (the caller rescales it to their mean: schedule.h KeptGradientScale).
//
// Views (per layer, the form Stage::Forward and Backward take) are made once at Create for every
// (weight arena, gradient arena) pair, so handing weights to a pass copies nothing.
//
// Under a narrower activation type (bf16) every weight arena has a copy in that type, the operands
// the products read (LayerParams::operand); whatever writes an arena writes its copy too (the
// optimizer in the same pass as its update), so a copy never lags its weights.
//
// Not thread-safe: the thread that drives the worker's backend uses it. Methods that return
// host data block until it is there; the others queue work on the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/nn/layer.h"
#include "site/nn/optimizer.h"
#include "site/nn/stage.h"

namespace strait::site {

// A version argument meaning "the newest weights the history holds".
inline constexpr int64_t kNewestWeights = -1;

// How a schedule versions a stage's weights.
struct WeightVersioning {
  int versions = 1;         // 2 for 2bw, 1 otherwise.
  float lookahead = 0.0f;   // c >= 0; > 0 only with two versions.
  bool drop_stale = false;  // Gradients of microbatches of step t computed with L_{t-1} dropped.
};

// The versioning of `training`'s schedule: two versions and training.lookahead for 2bw (and
// drop_stale for update eager with stale_gradients drop); one version and no lookahead otherwise.
WeightVersioning VersioningOf(const TrainingSpec& training);

class WeightHistory {
 public:
  // Arenas for the parameters of `stage` (which must outlive the history) on its backend, every
  // version initialised to the stage's InitialParams (L_0; P_0 = L_0), gradients zeroed.
  // InvalidArgument for versions other than 1 and 2, or a lookahead that is negative, not finite,
  // or > 0 with one version.
  static absl::StatusOr<std::unique_ptr<WeightHistory>> Create(const Stage& stage,
                                                               WeightVersioning versioning);
  ~WeightHistory();
  WeightHistory(const WeightHistory&) = delete;
  WeightHistory& operator=(const WeightHistory&) = delete;

  int versions() const { return versioning_.versions; }
  float lookahead() const { return versioning_.lookahead; }
  int64_t param_count() const { return param_count_; }
  // k of the newest weights L_k: the updates applied (counting those of a restored checkpoint).
  int64_t newest() const { return newest_; }

  // Per-layer views (in the stage's layer order) of the weights that microbatches of version
  // `version` compute with (L_version, or P_version with lookahead), their gradients going to the
  // arena of step `step`. The history must hold the version: the newest or, with two versions,
  // the previous one (FailedPrecondition naming `what` otherwise). kNewestWeights: the newest.
  // With drop_stale, a version older than `step` gets the arena of step - 1 (dropped).
  // The views live as long as the history, but which version an arena holds changes with Update
  // and Restore: ask again after either.
  absl::StatusOr<const std::vector<LayerParams>*> Views(int64_t version, int64_t step,
                                                        const char* what) const;

  // Whether microbatches computing with `version` may stay in flight across the next Update:
  // with two versions only those of the newest (Update overwrites the previous version's arena);
  // with one, every version (1f1b and gpipe flush before they update, so nothing is checked).
  bool SurvivesUpdate(int64_t version) const {
    return versioning_.versions == 1 || version == newest_;
  }

  // The gradient arena of step `step` in device memory (param_count() floats, layout order).
  float* grads(int64_t step) const { return grads_[GradArena(step)].f32(); }
  // Zeroes the gradient arena of step `step` (with two arenas, the one of step - 2, which must
  // have been applied by then).
  void ZeroGrads(int64_t step);

  // Makes L_step from the newest weights L_{step-1} and the gradient of step step - 1 scaled by
  // grad_scale (`step` counts updates from 1). With two versions the newest weights are kept as
  // the previous version first (copied on the backend); with lookahead, P_step is extrapolated
  // into the arena of P_{step-2}. The caller makes sure that no microbatch in flight computes with
  // a version this drops (SurvivesUpdate). Blocks until the backend is done.
  absl::Status Update(int64_t step, Optimizer& optimizer, float grad_scale);

  // Host copies, parameters in layout order. Newest: L_k. Previous: with two versions, what
  // microbatches of L_{k-1} compute with (L_{k-1}, or P_{k-1} with lookahead; L_0 while k = 0),
  // FailedPrecondition with one. Lookahead: with lookahead, P_k, FailedPrecondition without.
  // Grads: the gradient of step `step`.
  absl::StatusOr<std::vector<float>> Newest() const;
  absl::StatusOr<std::vector<float>> Previous() const;
  absl::StatusOr<std::vector<float>> Lookahead() const;
  absl::StatusOr<std::vector<float>> Grads(int64_t step) const;

  // Overwrites the newest weights (the version number stays).
  absl::Status SetNewest(absl::Span<const float> params);
  // Restores the weights of a checkpoint taken after `version` updates: the newest L_version and,
  // with two versions, `previous` and `lookahead` as Previous and Lookahead returned them (empty
  // where those fail; InvalidArgument when the sizes do not fit).
  absl::Status Restore(int64_t version, absl::Span<const float> newest,
                       absl::Span<const float> previous, absl::Span<const float> lookahead);

 private:
  WeightHistory() = default;
  int GradArena(int64_t step) const {
    const int n = versioning_.versions;
    return static_cast<int>((step % n + n) % n);
  }
  // The weight arena that microbatches of L_version compute with (without lookahead 0: the
  // newest, 1: the previous; with it 1 + version % 2), or FailedPrecondition.
  absl::StatusOr<int> Slot(int64_t version, const char* what) const;
  int LookaheadSlot(int64_t version) const { return 1 + static_cast<int>(version % 2); }
  absl::StatusOr<std::vector<float>> ToHost(const float* src) const;
  // The operand copy of weight arena `slot` (none under f32), and its refresh from the arena.
  TypedPtr Operands(int slot) const;
  void RefreshOperands(int slot);

  Backend* backend_ = nullptr;
  WeightVersioning versioning_;
  int64_t param_count_ = 0;
  int64_t newest_ = 0;
  // [0]: the newest weights; [1] (two versions): the previous version, or with lookahead
  // [1 + k % 2]: P_k. Gradient arenas by step parity.
  std::vector<DeviceBuffer> weights_, grads_;
  std::vector<DeviceBuffer> operands_;           // [slot], in the activation type; empty under f32
  std::vector<std::vector<LayerParams>> views_;  // [slot * versions + gradient arena]
};

}  // namespace strait::site
