#include "harness/job_spec_options.h"

namespace strait::harness {

void AddJobSpecOverrideOptions(CLI::App& cmd, JobSpecOverrides& o, const std::string& steps_help) {
  cmd.add_option("--steps", o.steps, steps_help)->check(CLI::PositiveNumber);
  cmd.add_option("--codec", o.codec,
                 "Codec chain of every link, both directions (e.g. int8+zstd, bf16, shuffle+zstd)")
      ->type_name("CHAIN");
  cmd.add_option("--forward-codec", o.forward_codec,
                 "Codec chain for activations (overrides --codec)")
      ->type_name("CHAIN");
  cmd.add_option("--backward-codec", o.backward_codec,
                 "Codec chain for gradients (overrides --codec)")
      ->type_name("CHAIN");
  cmd.add_option("--global-batch", o.global_batch, "Samples per step (training.global_batch)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--microbatches", o.microbatches, "Microbatches per step (training.microbatches)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--schedule", o.schedule, "Pipeline schedule (training.schedule)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "2bw"}));
  cmd.add_option(
         "--extra-in-flight", o.extra_in_flight,
         "Microbatches stage 0 keeps in flight beyond the schedule's own, to cover slow links "
         "(training.extra_in_flight)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--lookahead", o.lookahead,
                 "2bw: updates to extrapolate the forward weights by; 0 = plain PipeDream-2BW "
                 "(training.lookahead)")
      ->check(CLI::Range(0.0, 16.0));
  cmd.add_option("--update", o.update,
                 "2bw: when a stage applies a step's update: deferred (PipeDream-2BW, one step "
                 "late) or eager (after its own last backward of the step; clips with the last "
                 "step's norm) "
                 "(training.update)")
      ->check(CLI::IsMember({"deferred", "eager"}));
  cmd.add_option("--stale-gradients", o.stale_gradients,
                 "2bw with update eager: keep or drop the parameter gradients of the microbatches "
                 "a stage computed with its previous weights (training.stale_gradients)")
      ->check(CLI::IsMember({"keep", "drop"}));
  cmd.add_option("--grad-clip", o.grad_clip,
                 "Clip the gradient at this global norm; 0 = off (training.grad_clip)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option(
         "--chunk-size", o.chunk_size,
         "Size of the pieces a frame is pushed in (default 128KiB; a piece may be 1/64 larger "
         "to hold the codec header and tag); the gateway forwards each piece as it arrives "
         "(gateway.chunk_size)")
      ->type_name("SIZE");
}

}  // namespace strait::harness
