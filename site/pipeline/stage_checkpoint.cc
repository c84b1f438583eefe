#include "site/pipeline/stage_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "core/model_layout.h"
#include "core/schedule.h"
#include "core/status.h"
#include "site/nn/checkpoint.h"

namespace strait::site {

absl::Status SaveStageCheckpoint(const std::string& path, const JobSpec& spec,
                                 const StageExecutor& stage, int64_t step, Env* env) {
  CheckpointState s;
  if (stage.weight_versions() == 2) {
    if (stage.weights_version() != step) {
      return absl::FailedPreconditionError(
          absl::StrCat("a 2bw checkpoint of step ", step, " needs the weights L_", step,
                       "; the stage holds L_", stage.weights_version()));
    }
    s.weight_versions = 2;
    STRAIT_ASSIGN_OR_RETURN(s.previous_params, stage.PreviousParams());
    if (stage.lookahead() > 0.0f) {
      STRAIT_ASSIGN_OR_RETURN(s.lookahead_params, stage.LookaheadParams());
    }
  }
  s.step = step;
  s.optimizer_kind = static_cast<uint32_t>(spec.training.optimizer.kind);
  s.fingerprint = stage.Fingerprint();
  s.first_layer = stage.range().start;
  s.end_layer = stage.range().end;
  s.init_seed = spec.model.init_seed;
  s.data_seed = spec.data.seed;
  STRAIT_ASSIGN_OR_RETURN(s.params, stage.Params());
  STRAIT_ASSIGN_OR_RETURN(s.optimizer_state, stage.OptimizerState());
  if (LaggedClip(spec.training)) s.lagged_clip_scale = stage.lagged_clip_scale();
  return WriteCheckpoint(path, s, env);
}

absl::StatusOr<int64_t> LoadStageCheckpoint(const std::string& path, const JobSpec& spec,
                                            StageExecutor& stage, Env* env) {
  STRAIT_ASSIGN_OR_RETURN(CheckpointState s, ReadCheckpoint(path, env));
  auto mismatch = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, " does not match this job: ", what));
  };
  if (s.first_layer == stage.range().start && s.end_layer == stage.range().end) {
    STRAIT_RETURN_IF_ERROR(
        CheckShardParams(spec.model, stage.range(), static_cast<int64_t>(s.params.size()), path));
  }
  if (s.fingerprint != stage.Fingerprint() || s.first_layer != stage.range().start ||
      s.end_layer != stage.range().end) {
    return mismatch(absl::StrCat("it holds layers [", s.first_layer, ", ", s.end_layer,
                                 ") of another model or split (fingerprint ", s.fingerprint,
                                 ", expected ", stage.Fingerprint(), ")"));
  }
  if (s.optimizer_kind != static_cast<uint32_t>(spec.training.optimizer.kind)) {
    return mismatch("it was written with another optimizer");
  }
  if (s.init_seed != spec.model.init_seed || s.data_seed != spec.data.seed) {
    return mismatch(absl::StrCat("seeds init ", s.init_seed, " / data ", s.data_seed,
                                 ", the job has ", spec.model.init_seed, " / ", spec.data.seed));
  }
  if (static_cast<int>(s.weight_versions) != stage.weight_versions()) {
    auto versions = [](int n) { return n == 2 ? "two weight versions" : "one weight version"; };
    return mismatch(absl::StrCat(
        "it was written by a ", s.weight_versions == 2 ? "2bw" : "1f1b or gpipe", " run (",
        versions(s.weight_versions), "), and this job's schedule ",
        ToString(spec.training.schedule), " keeps ", versions(stage.weight_versions())));
  }
  if (s.lookahead_params.empty() != (stage.lookahead() <= 0.0f)) {
    return mismatch(absl::StrCat(
        "it was written by a 2bw run ", s.lookahead_params.empty() ? "without" : "with",
        " lookahead, and this job's training.lookahead is ", stage.lookahead()));
  }
  if (s.lagged_clip_scale.has_value() != LaggedClip(spec.training)) {
    return mismatch(s.lagged_clip_scale.has_value()
                        ? "it carries the clipping scale of a 2bw run with update eager and "
                          "grad_clip, and this job clips otherwise"
                        : "this job (2bw, update eager, grad_clip) needs the clipping scale of the "
                          "step before, which the checkpoint lacks");
  }
  STRAIT_RETURN_IF_ERROR(
      stage.RestoreWeights(s.step, s.params, s.previous_params, s.lookahead_params));
  if (s.lagged_clip_scale.has_value()) stage.set_lagged_clip_scale(*s.lagged_clip_scale);
  STRAIT_RETURN_IF_ERROR(stage.SetOptimizerState(s.optimizer_state));
  return s.step;
}

}  // namespace strait::site
