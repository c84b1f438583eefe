// One site's training session (DESIGN.md §4, §7): the state machine between the join and the end of
// training. It waits for the gateway's start, trains one rollback generation after another (a
// Rollback says from which checkpoint; a Pause or a newer Rollback ends a generation and the next
// one rebuilds the stage and loads that checkpoint), joins again when the gateway is lost, writes
// coordinated checkpoints, and reports progress to the gateway and to the run's report.
//
// It talks to the gateway only through a GatewayConnector (the gRPC one in production, an
// in-process fake in tests/unit/site/site_session_test.cc).
// What it builds and shows has rooms of its own: a generation's stage (StageFactory,
// stage_factory.h), its links (BuildStageLinks, stage_link_builder.h) and the progress after each
// step (StepProgress, step_progress.h).
//
// Join and Run are for one thread (the training thread); the handlers of events() may be called on
// any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "core/run_report.h"
#include "site/daemon/checkpoint_store.h"
#include "site/daemon/neighbour_keys.h"
#include "site/daemon/site_report_sender.h"
#include "site/daemon/stage_factory.h"
#include "site/daemon/step_progress.h"
#include "site/daemon/training_control.h"
#include "site/nn/evaluation.h"
#include "site/pipeline/generation_runner.h"
#include "site/pipeline/site_metrics.h"
#include "site/pipeline/site_runner.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/stage_server.h"
#include "site/rpc/gateway_connector.h"

namespace strait::site {

struct SessionOptions {
  int index = 0;  // This site's stage.
  // A teacher site of knowledge sharing (docs/distillation.md): its teacher stage, run forward only
  // by a TeacherRunner (no checkpoints: a teacher starts from any step); -1: a student site.
  int teacher_stage = -1;
  // A serving federation (docs/distillation.md, `strait-site --serve`): makes the decoder of this
  // stage's layers with its checkpoint's weights; the session then serves requests (StageServer)
  // instead of training. Null: the site trains.
  std::function<absl::StatusOr<std::unique_ptr<KvDecoder>>()> serve;
  int64_t total_steps = 0;  // How far the run goes.
  // Held-out evaluations through the pipeline: every training.eval_every steps and after the last
  // step. Every site of a federation must say the same (a site that skips an evaluation leaves its
  // neighbours waiting for its frames).
  bool evaluate = true;
  bool resume = false;  // Offer the newest valid checkpoint of this site at the join.
  double report_interval_s = 2.0;
  // How often the wait for the gateway's start is logged.
  std::chrono::milliseconds start_notice = std::chrono::seconds(10);
  // A site of several machines (its leader): the ranks' states, added to every report.
  std::function<std::vector<v1::RankStatus>()> ranks;
  // For the log line that says how long a restarted site took to train again.
  std::chrono::steady_clock::time_point process_start = std::chrono::steady_clock::now();
};

// What a session measured.
struct SessionFigures {
  int64_t steps_done = 0;        // Steps trained, replayed ones included.
  double train_seconds = 0;      // In the step loops only (as `strait train` counts), not in
                                 // waits for the other sites and the gateway's start.
  double train_cpu_seconds = 0;  // This process's CPU time (all threads) over the same loops.
  // From the end of the first step to the end of the last, less the last step's drain
  // (StepResult::drain_s): neither the pipeline's fill nor its drain counts.
  double steady_seconds = 0;
  std::optional<Evaluation> evaluation;  // Of the last generation's run (last stage).
  // Last stage: every evaluation, in step order (training.eval_every's, then the final one); those
  // from the step a rollback resumes at on are replaced by the replay's.
  std::vector<StepEvaluation> evaluations;

  double SamplesPerSecond(int global_batch) const;
  // Over the steady state (for benchmarks); SamplesPerSecond() with fewer than two steps.
  double SteadySamplesPerSecond(int global_batch) const;
};

class SiteSession {
 public:
  // `spec`, `checkpoints` and `report` must outlive the session. `view`: this site's replica and
  // the split the session starts from; the session keeps its own copy (a planned split's Rollback
  // may give the stages other layers). Progress lines, "interrupted" lines and the losses of the
  // last stage go to `report`.
  SiteSession(const JobSpec& spec, JobView view, SessionOptions options, StageFactory build_stage,
              CheckpointStore& checkpoints, RunReport& report);

  // The handlers a connector calls (control messages, joins, losses). Whoever is given them must be
  // closed or destroyed before the session.
  ConnectionEvents events();

  // Builds the stage, finds the checkpoint to offer (options.resume) and joins the gateway through
  // `connector` once. Blocks.
  absl::Status Join(GatewayConnector& connector);

  // Trains until the last step and evaluates (OK); returns ABORTED when the gateway stops the job,
  // FAILED_PRECONDITION when it resumes past the last step, UNAVAILABLE (naming the checkpoint to
  // resume from) when the gateway was lost and could not be joined again, or the error that ended
  // training. A Pause or Rollback is no error: the session waits for the next start. Blocks. Call
  // once, after Join succeeded, with the data of this stage.
  absl::Status Run(GatewayConnector& connector, const StageData& data);

  // After Run: the stage as the last generation left it, and what the session measured.
  const StageExecutor& stage() const { return *stage_; }
  const SessionFigures& figures() const { return figures_; }
  SiteMetrics& metrics() { return metrics_; }

 private:
  // The step loop's state within one generation.
  struct Pass {
    int64_t from = 0;  // The step the generation started at.
    std::chrono::steady_clock::time_point start;
    double trained_before = 0;  // train_seconds of the earlier generations.
    int64_t saved_through = 0;  // Newest checkpoint of this pass (or the one it resumed from).
    // Wall and CPU time of this pass's evaluations between steps, which are no training time.
    double evaluating_s = 0;
    double evaluating_cpu_s = 0;
    // train_seconds at `now`.
    double TrainedSeconds(std::chrono::steady_clock::time_point now) const {
      return trained_before + std::chrono::duration<double>(now - start).count() - evaluating_s;
    }
  };

  void HandleControl(const v1::Control& control);
  std::optional<int64_t> checkpoint();
  absl::Status Rejoin(GatewayConnector& connector);
  absl::Status RunGenerations(GatewayConnector& connector, const StageData& data,
                              SiteReportSender& sender);
  absl::StatusOr<std::unique_ptr<GenerationRunner>> StartGeneration(GatewayConnector& connector,
                                                                    const v1::Rollback& begin,
                                                                    const StageData& data);
  // The runner of a student site's generation from step `from` with `links`.
  absl::StatusOr<std::unique_ptr<GenerationRunner>> StudentRunner(StageLinks links,
                                                                  const StageData& data,
                                                                  StepRange steps);
  bool teacher() const { return options_.teacher_stage >= 0; }
  // Serving: one generation's StageServer, until the gateway ends it (site_session_serving.cc).
  absl::Status ServeGeneration(GatewayConnector& connector, const v1::Rollback& begin);
  // A client's request announced by the gateway: to the server, or kept until it exists.
  void TakeServeRequest(const v1::ServeRequest& request);
  // This site's layers: its stage's in the current split, or its teacher stage's.
  LayerRange Layers() const;
  // A planned split's Rollback: takes its split, and moves layers to and from the other sites.
  absl::Status TakeSplit(GatewayConnector& connector, const v1::Rollback& begin,
                         const std::map<std::string, v1::SignedKey>& keys);
  absl::Status TrainGeneration(GenerationRunner& runner, int64_t from, SiteReportSender& sender);
  absl::Status AfterStep(const GenerationRunner& runner, const StepResult& step, Pass& pass,
                         SiteReportSender& sender);
  // Whether the session evaluates once `steps_done` steps are done, before the next step.
  bool EvaluatesAfter(int64_t steps_done) const;
  // The held-out evaluation after step runner.step(): on the last stage recorded, reported and
  // printed. Its time is taken out of the pass's training time and the report's rate window.
  absl::Status EvaluateBetweenSteps(GenerationRunner& runner, Pass& pass, SiteReportSender& sender);
  // Records an evaluation after `step` steps (last stage) and puts it in the reports from now on
  // (the last one among them).
  void ReportEvaluation(int64_t step, const Evaluation& e);

  const JobSpec& spec_;
  JobView view_;  // The split of the current generation; set by TakeSplit.
  const SessionOptions options_;
  const StageFactory build_stage_;
  CheckpointStore& checkpoints_;
  RunReport& report_;
  std::vector<std::string> peers_;  // Neighbours whose keys seal a link with this site.

  TrainingControl control_;
  NeighbourKeys keys_;
  SiteMetrics metrics_;
  SiteProgress progress_;
  StepProgress step_progress_;  // Into progress_ and report_.
  std::unique_ptr<StageExecutor> stage_;
  int window_ = 1;
  std::mutex serve_mu_;
  StageServer* server_ = nullptr;               // Serving: the current generation's.
  std::deque<v1::ServeRequest> serve_pending_;  // Announced before it existed.  // Frames each link
                                                // direction keeps in flight.

  SessionFigures figures_;
  std::optional<std::chrono::steady_clock::time_point> first_step_end_;
  std::chrono::steady_clock::time_point last_step_end_;
  // Evaluations between steps after the first step's end (all before the last's): out of
  // steady_seconds.
  double evaluating_s_ = 0;
};

}  // namespace strait::site
