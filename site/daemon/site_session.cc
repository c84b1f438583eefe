#include "site/daemon/site_session.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cpu_time.h"
#include "core/status.h"
#include "core/teach_links.h"
#include "core/tied_embeddings.h"
#include "plan/split_planner.h"
#include "site/daemon/layer_moves.h"
#include "site/daemon/stage_link_builder.h"
#include "site/daemon/step_progress.h"
#include "site/pipeline/teacher_runner.h"

namespace strait::site {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Registers a generation's runner with the control while it trains, so that a Pause, Rollback or
// Stop aborts it; never leaves a runner registered after it is gone.
class ActiveRunner {
 public:
  ActiveRunner(TrainingControl& control, GenerationRunner& runner) : control_(control) {
    control_.SetActive(&runner);
  }
  ~ActiveRunner() { control_.SetActive(nullptr); }
  ActiveRunner(const ActiveRunner&) = delete;
  ActiveRunner& operator=(const ActiveRunner&) = delete;

 private:
  TrainingControl& control_;
};

}  // namespace

double SessionFigures::SamplesPerSecond(int global_batch) const {
  return static_cast<double>(steps_done) * global_batch / std::max(train_seconds, 1e-9);
}

double SessionFigures::SteadySamplesPerSecond(int global_batch) const {
  if (steps_done < 2) return SamplesPerSecond(global_batch);
  return static_cast<double>(steps_done - 1) * global_batch / std::max(steady_seconds, 1e-9);
}

SiteSession::SiteSession(const JobSpec& spec, JobView view, SessionOptions options,
                         StageFactory build_stage, CheckpointStore& checkpoints, RunReport& report)
    : spec_(spec),
      view_(std::move(view)),
      options_(std::move(options)),
      build_stage_(std::move(build_stage)),
      checkpoints_(checkpoints),
      report_(report),
      step_progress_(options_.total_steps, spec.training.global_batch, progress_, report) {
  const int slot = teacher() ? spec_.SiteSlots() + options_.teacher_stage
                             : view_.replica * spec_.Stages() + options_.index;
  if (!teacher()) {
    for (int peer : KeyPeers(spec_, options_.index)) peers_.push_back(view_.SiteId(spec_, peer));
    // The stage's other replicas: their pairwise masks (crypto/pairwise_masks.h).
    for (const std::string& id : spec_.StageReplicaIds(options_.index)) {
      if (id != view_.SiteId(spec_, options_.index)) peers_.push_back(id);
    }
  }
  for (int member : TeachLinkPartners(spec_, slot)) peers_.push_back(spec_.MemberIdAt(member));
  // Serving: the last stage sends the first its tokens.
  const int last = spec_.Stages() - 1;
  if (options_.serve && last > 1 && (options_.index == 0 || options_.index == last)) {
    peers_.push_back(spec_.sites[options_.index == 0 ? last : 0].id);
  }
}

LayerRange SiteSession::Layers() const {
  return teacher() ? spec_.teacher.sites[options_.teacher_stage].layers
                   : view_.Layers(options_.index);
}

ConnectionEvents SiteSession::events() {
  return {
      .joining = [this] { control_.Reconnected(); },
      .control = [this](const v1::Control& c) { HandleControl(c); },
      .lost = [this](const absl::Status& status) { control_.Disconnected(status); },
  };
}

void SiteSession::HandleControl(const v1::Control& c) {
  if (control_.Handle(c)) return;
  switch (c.kind_case()) {
    case v1::Control::kNeighbourKey:
      keys_.Add(c.neighbour_key());
      break;
    case v1::Control::kServe:
      TakeServeRequest(c.serve());
      break;
    case v1::Control::kSiteDown:
      spdlog::warn("site {} is down", c.site_down().site_id());
      break;
    default:
      spdlog::warn("control message {} is not handled by this version", c.kind_case());
      break;
  }
}

std::optional<int64_t> SiteSession::checkpoint() {
  std::lock_guard<std::mutex> lock(progress_.mu);
  return progress_.checkpoint;
}

absl::Status SiteSession::Join(GatewayConnector& connector) {
  const SiteSpec& site =
      teacher() ? spec_.teacher.sites[options_.teacher_stage] : spec_.sites[options_.index];
  const LayerRange layers = Layers();
  if (!options_.serve) {
    STRAIT_ASSIGN_OR_RETURN(stage_, build_stage_(layers));
  }
  if (options_.serve) {
    spdlog::info("serving layers [{}, {}) with their checkpoint's weights", layers.start,
                 layers.end);
  } else if (site.machines > 1) {
    spdlog::info("{} ranks ({} tensor-parallel), {} worker(s) each; this rank's: {}", site.machines,
                 site.tensor_parallel, site.workers, stage_->device_names());
  } else {
    spdlog::info("{} worker(s): {}", site.workers, stage_->device_names());
  }
  if (options_.serve) {
    // Serving holds no training state: nothing to resume.
  } else if (options_.resume && teacher()) {
    spdlog::info(
        "--resume: a teacher site holds no training state; it starts from the step the "
        "student's sites resume from");
  } else if (options_.resume) {
    absl::StatusOr<int64_t> newest = checkpoints_.NewestValid(*stage_);
    if (newest.ok()) {
      spdlog::info(
          "can resume from {} (the federation resumes from the newest step every site has)",
          checkpoints_.PathFor(*newest));
      std::lock_guard<std::mutex> lock(progress_.mu);
      progress_.checkpoint = *newest;
    } else {
      spdlog::warn("--resume: {}; starting from the initial parameters",
                   std::string(newest.status().message()));
    }
  }
  window_ = LinkWindow(spec_);
  if (teacher()) {
    spdlog::info(
        "teacher stage {} of {} (layers [{}, {}) of the teacher), joining the gateway at {}",
        options_.teacher_stage, spec_.TeacherStages(), layers.start, layers.end,
        spec_.gateway.address);
  } else {
    spdlog::info("stage {} of {} (layers [{}, {})), joining the gateway at {}", options_.index,
                 spec_.sites.size(), layers.start, layers.end, spec_.gateway.address);
  }
  STRAIT_ASSIGN_OR_RETURN(v1::JoinReply reply, connector.Join(checkpoint()));
  for (const v1::SignedKey& k : reply.neighbour_keys()) keys_.Add(k);
  return absl::OkStatus();
}

absl::Status SiteSession::Rejoin(GatewayConnector& connector) {
  absl::StatusOr<v1::JoinReply> reply = connector.Rejoin(checkpoint());
  if (!reply.ok()) {
    const std::optional<int64_t> newest = checkpoint();
    return absl::Status(
        reply.status().code(),
        absl::StrCat(
            reply.status().message(), " ",
            newest ? absl::StrCat("The checkpoint of step ", *newest, " is in ", checkpoints_.dir(),
                                  ": start this site again with --resume once the "
                                  "gateway is back")
                   : std::string("No checkpoint was written: the run starts over")));
  }
  for (const v1::SignedKey& k : reply->neighbour_keys()) keys_.Add(k);
  return absl::OkStatus();
}

absl::Status SiteSession::Run(GatewayConnector& connector, const StageData& data) {
  absl::Status result;
  {
    SiteReportSender sender(
        [this, &connector](const v1::SiteReport& r) {
          if (!options_.ranks) return connector.link().Report(r);
          v1::SiteReport with_ranks = r;
          for (v1::RankStatus& s : options_.ranks()) *with_ranks.add_ranks() = std::move(s);
          connector.link().Report(with_ranks);
        },
        metrics_, progress_, options_.report_interval_s);
    result = RunGenerations(connector, data, sender);
    if (result.ok()) sender.MarkFinished();
  }
  if (first_step_end_) {
    figures_.steady_seconds = Seconds(*first_step_end_, last_step_end_) - evaluating_s_;
  }
  return result;
}

// One pass per generation: the gateway's Rollback says from which checkpoint; a Pause (a site went
// down) or a newer Rollback ends the pass, and the next one starts over from there.
absl::Status SiteSession::RunGenerations(GatewayConnector& connector, const StageData& data,
                                         SiteReportSender& sender) {
  while (true) {
    absl::StatusOr<v1::Rollback> begin = control_.WaitForStart(options_.start_notice, [] {
      spdlog::info("waiting for the gateway to start training (every site must be joined)");
    });
    if (!begin.ok() && begin.status().code() == absl::StatusCode::kUnavailable) {
      spdlog::warn("lost the gateway: {}; joining it again", std::string(begin.status().message()));
      STRAIT_RETURN_IF_ERROR(Rejoin(connector));
      continue;
    }
    if (!begin.ok()) return begin.status();
    const auto from = static_cast<int64_t>(begin->step());
    if (options_.serve) {
      const absl::Status served = ServeGeneration(connector, *begin);
      if (!control_.Interrupted()) return served;
      spdlog::warn("serving interrupted: {}; waiting for the gateway's rollback",
                   control_.interruption());
      continue;
    }
    if (from > options_.total_steps) {
      return absl::FailedPreconditionError(absl::StrCat("the federation resumes at step ", from,
                                                        ", past this job's ", options_.total_steps,
                                                        " steps"));
    }
    absl::StatusOr<std::unique_ptr<GenerationRunner>> runner =
        StartGeneration(connector, *begin, data);
    if (!runner.ok() && control_.Interrupted()) {  // Ended while layers moved: wait for the next.
      spdlog::warn("generation {} ended before it trained: {}", begin->generation(),
                   control_.interruption());
      continue;
    }
    if (!runner.ok()) return runner.status();
    const absl::Status result = TrainGeneration(**runner, from, sender);
    if (result.ok() || !control_.Interrupted()) return result;
    spdlog::warn("training interrupted at step {}: {}; waiting for the gateway's rollback",
                 (*runner)->step(), control_.interruption());
    report_.Print(
        absl::StrFormat("interrupted at step %d: %s", (*runner)->step(), control_.interruption()));
  }
}

// A new stage for the generation `begin` starts, loaded from its checkpoint, with links sealed by
// the neighbours' current keys.
absl::StatusOr<std::unique_ptr<GenerationRunner>> SiteSession::StartGeneration(
    GatewayConnector& connector, const v1::Rollback& begin, const StageData& data) {
  const auto from = static_cast<int64_t>(begin.step());
  const uint32_t generation = begin.generation();
  STRAIT_ASSIGN_OR_RETURN(auto peer_keys,
                          keys_.WaitFor(peers_, std::chrono::minutes(10), std::chrono::seconds(10),
                                        [](const std::string& missing) {
                                          spdlog::info("waiting for the key of {}", missing);
                                        }));
  // A teacher keeps its layers (a planned split moves the student's).
  if (begin.split_size() > 0 && !teacher()) {
    STRAIT_RETURN_IF_ERROR(TakeSplit(connector, begin, peer_keys));
  }
  const StepRange steps{
      .total_steps = options_.total_steps, .start_step = from, .generation = generation};
  const LinkSealing sealing{.security = connector.security(),
                            .peers = &peer_keys,
                            .generation = generation,
                            .replica = view_.replica};
  std::unique_ptr<GenerationRunner> runner;
  if (teacher()) {
    // The teacher's weights are its checkpoint's whatever the step: the stage built at the join.
    spdlog::info("teaching from step {} (generation {})", from, generation);
    STRAIT_ASSIGN_OR_RETURN(
        StageLinks links,
        BuildTeacherLinks(spec_, options_.teacher_stage, connector.link(), sealing, metrics_,
                          LinkLimitsOf(spec_, *stage_, window_)));
    runner = std::make_unique<TeacherRunner>(spec_, options_.teacher_stage, *stage_,
                                             StageIo{std::move(links), data}, metrics_, steps);
  } else {
    STRAIT_ASSIGN_OR_RETURN(stage_, build_stage_(view_.Layers(options_.index)));
    if (from > 0) STRAIT_RETURN_IF_ERROR(checkpoints_.Load(from, *stage_));
    spdlog::info("training from {} (generation {})",
                 from == 0 ? std::string("the initial parameters") : checkpoints_.PathFor(from),
                 generation);
    STRAIT_ASSIGN_OR_RETURN(StageLinks links,
                            BuildStageLinks(spec_, options_.index, connector.link(), sealing,
                                            metrics_, LinkLimitsOf(spec_, *stage_, window_)));
    STRAIT_ASSIGN_OR_RETURN(runner, StudentRunner(std::move(links), data, steps));
  }
  // Losses and evaluations of the steps replayed from here on replace the abandoned generation's
  // (the evaluation due at `from` is made again: an interruption may have cut it short).
  report_.losses().Restart(from);
  std::erase_if(figures_.evaluations, [from](const StepEvaluation& e) { return e.step >= from; });
  std::lock_guard<std::mutex> lock(progress_.mu);
  progress_.generation = generation;
  return runner;
}

absl::StatusOr<std::unique_ptr<GenerationRunner>> SiteSession::StudentRunner(StageLinks links,
                                                                             const StageData& data,
                                                                             StepRange steps) {
  auto runner =
      std::make_unique<SiteRunner>(spec_, options_.index, *stage_,
                                   StageIo{std::move(links), data, view_.replica}, metrics_, steps);
  if (steps.start_step > 0 && runner->has_outer_rounds()) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> outer,
                            checkpoints_.LoadOuterState(steps.start_step));
    STRAIT_RETURN_IF_ERROR(runner->SetOuterState(outer));
  }
  return runner;
}

absl::Status SiteSession::TakeSplit(GatewayConnector& connector, const v1::Rollback& begin,
                                    const std::map<std::string, v1::SignedKey>& keys) {
  if (!spec_.SplitMayMove()) {
    return absl::FailedPreconditionError(
        "the gateway sent a split, but this job's split is written in its spec");
  }
  std::vector<LayerRange> split;
  for (const v1::LayerRange& r : begin.split()) {
    split.push_back({static_cast<int>(r.start()), static_cast<int>(r.end())});
  }
  STRAIT_ASSIGN_OR_RETURN(JobView planned, plan::ApplySplit(spec_, view_, split));
  const LayerRange before = view_.Layers(options_.index);
  const LayerRange now = planned.Layers(options_.index);
  view_ = std::move(planned);
  if (!(before == now)) {
    spdlog::info("the gateway planned the split again: {}; this site's layers are now [{}, {})",
                 plan::SplitToString(split), now.start, now.end);
    report_.Print(absl::StrFormat("split planned again: %s; layers [%d, %d) here",
                                  plan::SplitToString(split), now.start, now.end));
  }
  // From the initial parameters nothing moves: every layer starts from its seed.
  if (begin.step() == 0) return absl::OkStatus();
  return MoveLayers({.spec = &spec_,
                     .view = &view_,
                     .index = options_.index,
                     .step = static_cast<int64_t>(begin.step()),
                     .generation = begin.generation(),
                     .link = &connector.link(),
                     .security = connector.security(),
                     .keys = &keys,
                     .interrupted = [this] { return control_.Interrupted(); }},
                    checkpoints_);
}

// Trains `runner` to the last step, evaluating every training.eval_every steps, then evaluates
// and flushes. A Pause, Rollback or Stop aborts it (the runner's error, which RunGenerations tells
// from a failure by TrainingControl). A replayed step evaluates again, as it trains again, and so
// does the step a generation starts from.
absl::Status SiteSession::TrainGeneration(GenerationRunner& runner, int64_t from,
                                          SiteReportSender& sender) {
  ActiveRunner active(control_, runner);
  // Training time counts the step loops only (as `strait train` does), not the waits for the other
  // sites to join and for the gateway's start, nor the evaluations.
  Pass pass{.from = from,
            .start = Clock::now(),
            .trained_before = figures_.train_seconds,
            .saved_through = from};
  const double cpu_at_start = ProcessCpuSeconds();
  report_.RestartWindow(pass.start);
  absl::Status result;
  if (EvaluatesAfter(from)) result = EvaluateBetweenSteps(runner, pass, sender);
  while (result.ok() && runner.step() < options_.total_steps) {
    const bool evaluate = EvaluatesAfter(runner.step() + 1);
    absl::StatusOr<StepResult> step = runner.Step(/*then_evaluate=*/evaluate);
    result = step.ok() ? AfterStep(runner, *step, pass, sender) : step.status();
    if (result.ok() && evaluate) result = EvaluateBetweenSteps(runner, pass, sender);
  }
  figures_.train_seconds = pass.TrainedSeconds(Clock::now());
  figures_.train_cpu_seconds += ProcessCpuSeconds() - cpu_at_start - pass.evaluating_cpu_s;
  if (result.ok() && options_.evaluate) {
    absl::StatusOr<std::optional<Evaluation>> evaluated = runner.Evaluate();
    if (evaluated.ok()) {
      figures_.evaluation = *evaluated;
      if (*evaluated) ReportEvaluation(runner.step(), **evaluated);
    } else {
      result = evaluated.status();
    }
  }
  if (result.ok()) result = runner.Flush();
  return result;
}

// Every site evaluates after the same steps: they all read the same training.eval_every (the
// gateway checks that their job specs agree) and total steps.
bool SiteSession::EvaluatesAfter(int64_t steps_done) const {
  return options_.evaluate && spec_.training.EvaluatesAfter(steps_done, options_.total_steps);
}

absl::Status SiteSession::EvaluateBetweenSteps(GenerationRunner& runner, Pass& pass,
                                               SiteReportSender& sender) {
  const Clock::time_point start = Clock::now();
  const double cpu_at_start = ProcessCpuSeconds();
  absl::StatusOr<std::optional<Evaluation>> evaluated = runner.Evaluate();
  if (evaluated.ok() && *evaluated) {
    ReportEvaluation(runner.step(), **evaluated);
    report_.Print(DescribeEvaluationAt(spec_.model, figures_.evaluations.back()));
    sender.SendSoon();  // The dashboard shows it now rather than at the next report.
  }
  // Taken out of the training time even when a Pause or Rollback cut it short.
  const Clock::time_point end = Clock::now();
  pass.evaluating_s += Seconds(start, end);
  pass.evaluating_cpu_s += ProcessCpuSeconds() - cpu_at_start;
  if (first_step_end_) evaluating_s_ += Seconds(start, end);  // Inside the steady window.
  report_.RestartWindow(end);  // The next progress line's rate is of training only.
  return evaluated.status();
}

void SiteSession::ReportEvaluation(int64_t step, const Evaluation& e) {
  figures_.evaluations.push_back({step, e});
  v1::HeldOutEvaluation report;
  report.set_loss(e.loss);
  report.set_accuracy(e.accuracy);
  if (spec_.model.IsLanguageModel()) {
    report.set_language_model(true);
    report.set_bits_per_byte(BitsPerByte(e));
  }
  std::lock_guard<std::mutex> lock(progress_.mu);
  progress_.evaluation = report;
}

// The bookkeeping of a step just taken: figures, the loss, a coordinated checkpoint when one is
// due, progress.
absl::Status SiteSession::AfterStep(const GenerationRunner& runner, const StepResult& step,
                                    Pass& pass, SiteReportSender& sender) {
  ++figures_.steps_done;
  const Clock::time_point now = Clock::now();
  if (!first_step_end_) first_step_end_ = now;
  last_step_end_ = now - std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(step.drain_s));
  report_.CountStep();
  if (step.loss) report_.losses().Add(*step.loss);
  if (runner.step() == pass.from + 1) {
    sender.SendSoon();
    if (pass.from > 0) {
      spdlog::info("training again from step {}, {:.1f} s after this process started", pass.from,
                   Seconds(options_.process_start, now));
    }
  }
  // Checkpoint k holds the state right after the update that made L_k: after Step(k - 1) with 1f1b
  // and eager 2bw, after Step(k) with deferred 2bw (SiteRunner::updates()).
  // A teacher holds nothing that training changes: no checkpoints.
  if (const int64_t k = runner.updates();
      !teacher() && k > pass.saved_through && checkpoints_.Due(k)) {
    const std::optional<std::vector<float>> outer = runner.OuterState();
    STRAIT_RETURN_IF_ERROR(checkpoints_.Save(k, *stage_, outer ? &*outer : nullptr));
    pass.saved_through = k;
    {
      std::lock_guard<std::mutex> lock(progress_.mu);
      progress_.checkpoint = k;
    }
    sender.SendSoon();  // The gateway's common checkpoint is what a recovery starts from.
  }
  // A progress line at a generation's first step, before an evaluation and at the last step too.
  const int64_t done = runner.step();
  step_progress_.Show(
      {.step = done,
       .loss = step.loss,
       .steps_trained = figures_.steps_done,
       .trained_seconds = pass.TrainedSeconds(now)},
      /*line_due=*/done == options_.total_steps || done == pass.from + 1 || EvaluatesAfter(done),
      now);
  return absl::OkStatus();
}

}  // namespace strait::site
