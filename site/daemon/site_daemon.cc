#include "site/daemon/site_daemon.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/env.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "core/run_report.h"
#include "core/status.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "plan/split_planner.h"
#include "site/daemon/checkpoint_store.h"
#include "site/daemon/planned_split.h"
#include "site/daemon/rank_follower.h"
#include "site/daemon/rank_leader.h"
#include "site/daemon/site_session.h"
#include "site/daemon/stage_factory.h"
#include "site/data/dataset.h"
#include "site/data/tokenizer.h"
#include "site/nn/checkpoint.h"
#include "site/nn/checkpoint_layers.h"
#include "site/nn/evaluation.h"
#include "site/nn/kv_decoder.h"
#include "site/pipeline/stage_checkpoint.h"
#include "site/rpc/gateway_connection.h"

namespace strait::site {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The TLS paths: options first, then the job spec's tls: section.
absl::StatusOr<crypto::TlsMaterial> LoadSiteTls(const SiteOptions& o, const JobSpec& spec) {
  const std::string ca = o.ca.empty() ? spec.tls.ca : o.ca;
  const std::string cert = o.cert.empty() ? spec.tls.SiteCert(o.site_id) : o.cert;
  const std::string key = o.key.empty() ? spec.tls.SiteKey(o.site_id) : o.key;
  absl::StatusOr<crypto::TlsMaterial> material = crypto::LoadTlsMaterial(ca, cert, key);
  if (!material.ok()) {
    return Invalid(
        absl::StrCat(material.status().message(),
                     " (make certificates with `strait certs`, or pass --cert/--key/--ca)"));
  }
  return material;
}

// The job spec with the command line's overrides applied, and this site's member slot in it
// (replica by replica, then the teacher's: JobSpec::MemberSlot).
absl::StatusOr<std::pair<JobSpec, int>> LoadSpec(const SiteOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok()) return Invalid(std::string(spec.status().message()));
  const int slot = spec->MemberSlot(o.site_id);
  if (slot < 0) {
    std::string ids;
    for (int i = 0; i < spec->MemberSlots(); ++i) {
      ids += (ids.empty() ? "" : ", ") + spec->MemberIdAt(i);
    }
    return Invalid(absl::StrCat(o.config, ": no site '", o.site_id, "'; the sites are ", ids));
  }
  if (o.steps > 0) {
    spec->training.steps = o.steps;
    spec->training.epochs = 0;
  }
  if (!o.gateway.empty()) spec->gateway.address = o.gateway;
  return std::make_pair(*std::move(spec), slot);
}

// Loads what this stage reads of the data set (DESIGN.md §1: data stays at its site).
absl::StatusOr<StageData> LoadStageData(const JobSpec& spec, bool first, bool last) {
  StageData data;
  if (first || last) {
    STRAIT_ASSIGN_OR_RETURN(Dataset train, LoadDataset(spec.data, spec.model, Split::kTrain));
    STRAIT_ASSIGN_OR_RETURN(Dataset test, LoadDataset(spec.data, spec.model, Split::kTest));
    if (train.size < int64_t{spec.training.global_batch} * spec.Replicas()) {
      return Invalid(absl::StrCat(
          "the training set has ", train.size, " samples, fewer than one global batch of ",
          spec.training.global_batch, " for each of ", spec.Replicas(), " replica(s)"));
    }
    data.test_size = test.size;
    data.train = std::make_shared<const Dataset>(std::move(train));
    data.test = std::make_shared<const Dataset>(std::move(test));
  } else {
    STRAIT_ASSIGN_OR_RETURN(data.test_size, DatasetSize(spec.data, spec.model, Split::kTest));
  }
  return data;
}

// What RunSite works from: the job spec with the command line's overrides (immutable once the
// split is planned), this site's place in it, the run's length, and the site's identity.
struct SiteSetup {
  JobSpec spec;
  // This site's replica and the split it starts with (a replica's site runs its stage as replica
  // 0's does, with its pipeline's ids).
  JobView view;
  int index = 0;
  int teacher_stage = -1;  // A teacher site of knowledge sharing: its teacher stage.
  int64_t total_steps = 0;
  crypto::TlsMaterial tls;  // The site's certificate and key, and the federation CA.
  crypto::DenyList deny_list;
};

// --serve: a job with clients, a student site, its layers written in the spec, and its weights.
absl::Status CheckServing(const SiteOptions& o, const JobSpec& spec, bool teacher) {
  std::string refusal;
  if (spec.serving.clients.empty()) {
    refusal = absl::StrCat(o.config, " names no serving.clients");
  } else if (teacher) {
    refusal = "a teacher site does not serve";
  } else if (spec.PlansSplit()) {
    refusal = "every site's layers must be written in the job spec (no layers: auto)";
  } else if (o.serve_checkpoint.empty()) {
    refusal = "give this site's weights with --checkpoint FILE";
  }
  return refusal.empty() ? absl::OkStatus() : Invalid("--serve: " + refusal);
}

absl::StatusOr<SiteSetup> LoadSetup(const SiteOptions& o) {
  SiteSetup setup;
  int slot = 0;
  STRAIT_ASSIGN_OR_RETURN(std::tie(setup.spec, slot), LoadSpec(o));
  const JobSpec& spec = setup.spec;
  setup.teacher_stage = spec.TeacherStageOf(slot);
  const bool teacher = setup.teacher_stage >= 0;
  setup.index = teacher ? spec.Stages() - 1 : slot % spec.Stages();  // A teacher's: unused.
  setup.view = JobView::Initial(spec, teacher ? 0 : slot / spec.Stages());
  const int index = setup.index;
  if (o.threads < 1) return Invalid("--threads must be at least 1");
  if (o.serve) STRAIT_RETURN_IF_ERROR(CheckServing(o, spec, teacher));
  const SiteSpec& site = teacher ? spec.teacher.sites[setup.teacher_stage] : spec.sites[index];
  if (o.rank < 0 || o.rank >= site.machines) {
    return Invalid(absl::StrCat(
        "--rank ", o.rank, ": site '", o.site_id, "' runs on ", site.machines,
        " machine(s), ranks 0 to ", site.machines - 1, " (", teacher ? "teacher.sites[" : "sites[",
        teacher ? setup.teacher_stage : index, "].machines in ", o.config, ")"));
  }
  if (site.machines > 1 && o.leader.empty()) {
    return Invalid(absl::StrCat("site '", o.site_id, "' runs on ", site.machines,
                                " machines: give every rank --leader HOST:PORT, the address on "
                                "which rank 0 listens for the others"));
  }
  // A tokenizer that does not fit the model stops the site before it joins (every site checks:
  // a middle stage tokenizes too, to count the evaluation windows).
  if (spec.data.kind == DatasetKind::kText) {
    STRAIT_RETURN_IF_ERROR(LoadTokenizer(spec.data, spec.model.gpt).status());
  }
  // Identity: the certificate authenticates the gRPC channel and signs each epoch's link key.
  // The ranks of a site of several machines authenticate each other with the site's certificate.
  STRAIT_ASSIGN_OR_RETURN(setup.tls, LoadSiteTls(o, spec));
  if (!spec.tls.deny_list.empty()) {
    STRAIT_ASSIGN_OR_RETURN(setup.deny_list, crypto::DenyList::Load(spec.tls.deny_list));
  }
  setup.total_steps = spec.training.steps;
  if (setup.total_steps == 0) {
    STRAIT_ASSIGN_OR_RETURN(int64_t train_size, DatasetSize(spec.data, spec.model, Split::kTrain));
    // Each replica's batch of a step comes from the same epoch (site/data/sampler.h).
    setup.total_steps = int64_t{spec.training.epochs} *
                        (train_size / (int64_t{spec.training.global_batch} * spec.Replicas()));
  }
  return setup;
}

nlohmann::json LinksJson(const std::vector<v1::LinkBytes>& links) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::LinkBytes& l : links) {
    out.push_back({{"boundary", l.boundary()},
                   {"direction", l.direction() == v1::FORWARD ? "forward" : "backward"},
                   {"sent", l.sent()},
                   {"raw_bytes", l.raw_bytes()},
                   {"wire_bytes", l.wire_bytes()},
                   {"frames", l.frames()},
                   // A replica's secure sums (boundary: its stage), not a pipeline link.
                   {"sum", l.purpose() == v1::SUM},
                   // A teacher's link (boundary: its teacher stage; docs/distillation.md).
                   {"teach", l.purpose() == v1::TEACH}});
  }
  return out;
}

// metrics.json of a site (bench/e2e_bench.cc, tools/demo_command.cc and the integration tests read
// these keys).
nlohmann::json SiteMetricsJson(const SiteOptions& o, const SiteSetup& setup, SiteSession& session,
                               const LossHistory& losses) {
  const int global_batch = setup.spec.training.global_batch;
  const SessionFigures& figures = session.figures();
  const SiteMetrics::Totals totals = session.metrics().Snapshot();
  nlohmann::json summary = {
      {"site", o.site_id},
      {"stage", setup.teacher_stage >= 0 ? setup.teacher_stage : setup.index},
      {"teacher", setup.teacher_stage >= 0},
      {"steps", setup.total_steps},
      {"samples_per_second", figures.SamplesPerSecond(global_batch)},
      {"steady_samples_per_second", figures.SteadySamplesPerSecond(global_batch)},
      {"train_seconds", figures.train_seconds},
      {"train_cpu_seconds", figures.train_cpu_seconds},
      {"links", LinksJson(totals.links)},
      {"rejected_frames", totals.rejected_frames},
      {"time",
       {{"compute_s", totals.Seconds(Timer::kCompute)},
        {"wait_s", totals.Seconds(Timer::kWait)},
        {"encode_s", totals.Seconds(Timer::kEncode)},
        {"decode_s", totals.Seconds(Timer::kDecode)},
        {"seal_s", totals.Seconds(Timer::kSeal)},
        {"open_s", totals.Seconds(Timer::kOpen)},
        {"forward_s", totals.Seconds(Timer::kForward)},
        {"backward_s", totals.Seconds(Timer::kBackward)},
        {"update_s", totals.Seconds(Timer::kUpdate)},
        {"teacher_wait_s", totals.Seconds(Timer::kTeacherWait)}}}};
  if (setup.teacher_stage < 0 &&
      setup.index + 1 == static_cast<int>(setup.spec.sites.size())) {  // The last stage.
    summary["loss"] = losses.losses();
    summary["loss_first_step"] = losses.first_step();
  }
  if (totals.outer.rounds > 0) {
    const OuterRoundTotals& outer = totals.outer;
    summary["outer"] = {{"rounds", outer.rounds},
                        {"round_s", outer.round_s},
                        {"exposed_s", outer.exposed_s},
                        {"bytes", outer.bytes},
                        {"dense_bytes", outer.dense_bytes},
                        {"steady_bytes", outer.latest.bytes},
                        {"steady_dense_bytes", outer.latest.dense_bytes}};
  }
  if (figures.evaluation) AddEvaluationJson(setup.spec.model, *figures.evaluation, summary);
  if (!figures.evaluations.empty()) {
    summary["evaluations"] = EvaluationsJson(setup.spec.model, figures.evaluations);
  }
  return summary;
}

// final.ckpt and metrics.json in --out.
absl::Status WriteResults(const SiteOptions& o, const SiteSetup& setup, SiteSession& session,
                          RunReport& report) {
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) return absl::InternalError("cannot create --out " + o.out + ": " + ec.message());
  if (setup.teacher_stage < 0) {  // A teacher's weights are its checkpoint's: nothing new.
    STRAIT_RETURN_IF_ERROR(
        SaveStageCheckpoint(o.out + "/final.ckpt", setup.spec, session.stage(), setup.total_steps));
  }
  report.metrics() = SiteMetricsJson(o, setup, session, report.losses());
  return report.WriteMetrics(o.out);
}

// Serving: the decoder of this site's layers, with the weights of --checkpoint (the site's own,
// or a whole model's cut to its layers).
absl::StatusOr<std::unique_ptr<KvDecoder>> ServingDecoder(const SiteOptions& o,
                                                          const SiteSetup& setup) {
  const ModelSpec& model = setup.spec.model;
  const LayerRange layers = setup.view.Layers(setup.index);
  absl::StatusOr<CheckpointState> file = ReadCheckpoint(o.serve_checkpoint);
  if (!file.ok()) return Invalid(absl::StrCat("--checkpoint: ", file.status().message()));
  const LayerRange held{file->first_layer, file->end_layer};
  absl::StatusOr<CheckpointState> part =
      file->fingerprint == StageFingerprint(model, held)
          ? CutLayers(*file, model, layers)
          : absl::InvalidArgumentError("it holds layers of another model");
  if (!part.ok()) {
    return Invalid(absl::StrCat("--checkpoint ", o.serve_checkpoint, " (layers [", held.start, ", ",
                                held.end, ")) cannot give this site's layers [", layers.start, ", ",
                                layers.end, ") of ", o.config, ": ", part.status().message()));
  }
  return KvDecoder::Create(model, layers, std::move(part->params));
}

SessionOptions SessionOptionsFor(const SiteOptions& o, const SiteSetup& setup) {
  SessionOptions options;
  if (o.serve) options.serve = [&o, &setup] { return ServingDecoder(o, setup); };
  options.index = setup.index;
  options.teacher_stage = setup.teacher_stage;
  options.total_steps = setup.total_steps;
  options.evaluate = o.evaluate;
  options.resume = o.resume;
  options.report_interval_s = o.report_interval_s;
  return options;
}

GatewayConnection::Options ConnectionOptionsFor(const SiteOptions& o, const SiteSetup& setup) {
  GatewayConnection::Options options;
  options.spec = &setup.spec;
  options.view = &setup.view;
  options.index = setup.index;
  options.teacher_stage = setup.teacher_stage;
  options.total_steps = setup.total_steps;
  options.tls = setup.tls;
  options.deny_list = setup.deny_list;
  options.reconnect_timeout_s = o.reconnect_timeout_s;
  return options;
}

// What every join of this site process runs with: its options and setup, its stage's data, the
// run's report, and when the process started.
struct SiteRun {
  const SiteOptions& options;
  const SiteSetup& setup;
  const StageData& data;
  RunReport& report;
  std::chrono::steady_clock::time_point process_start;
};

// One join of the federation: the session of this process (or of this formation of the site's
// group), from the join to the end of training or the failure that ends it. `epoch`: the newest
// join epoch so far, updated (a later join must use a larger one). `leader`: the site's ranks, on
// the leader of several.
absl::Status TrainSite(const SiteRun& run, StageFactory factory, bool resume, uint32_t& epoch,
                       const RankLeader* leader = nullptr) {
  const SiteOptions& o = run.options;
  const SiteSetup& setup = run.setup;
  RunReport& report = run.report;
  const JobSpec& spec = setup.spec;
  const int stages = static_cast<int>(spec.sites.size());
  CheckpointStore checkpoints(spec, o.site_id, *Env::Default());
  SessionOptions session_options = SessionOptionsFor(o, setup);
  session_options.resume = resume;
  session_options.process_start = run.process_start;
  if (leader != nullptr) session_options.ranks = [leader] { return leader->RankStates(); };
  SiteSession session(spec, setup.view, session_options, std::move(factory), checkpoints, report);
  GatewayConnection::Options connection_options = ConnectionOptionsFor(o, setup);
  connection_options.min_epoch = epoch + 1;
  // After the session, whose handlers it calls: destroyed (and so closed) first, on every path.
  GatewayConnection connection(connection_options, session.events());
  absl::Status result = session.Join(connection);
  epoch = std::max(epoch, connection.epoch());
  if (!result.ok()) return result;

  if (setup.teacher_stage >= 0) {
    const LayerRange& layers = spec.teacher.sites[setup.teacher_stage].layers;
    report.Print(
        absl::StrFormat("%s: teacher stage %d of %d, layers [%d, %d) of the teacher, %d "
                        "steps",
                        o.site_id, setup.teacher_stage, spec.TeacherStages(), layers.start,
                        layers.end, setup.total_steps));
  } else {
    const LayerRange& layers = setup.view.Layers(setup.index);
    report.Print(absl::StrFormat("%s: stage %d of %d, layers [%d, %d), %d steps", o.site_id,
                                 setup.index, stages, layers.start, layers.end, setup.total_steps));
  }
  result = session.Run(connection, run.data);
  epoch = std::max(epoch, connection.epoch());
  if (const std::optional<Evaluation> evaluation = session.figures().evaluation) {
    report.Print(absl::StrFormat("%s after %d steps; %.0f samples/s",
                                 DescribeEvaluation(spec.model, *evaluation), setup.total_steps,
                                 session.figures().SamplesPerSecond(spec.training.global_batch)));
  }
  if (result.ok() && !o.out.empty() && !o.serve) result = WriteResults(o, setup, session, report);
  if (absl::Status closed = connection.Close(); !closed.ok() && result.ok()) {
    spdlog::debug("stream closed: {}", closed.ToString());
  }
  return result;
}

// Where this rank's Gloo connections bind: --collective-host, else loopback when the leader is on
// loopback (one machine), else the machine's name.
std::string CollectiveHost(const SiteOptions& o) {
  if (!o.collective_host.empty()) return o.collective_host;
  const std::string host = o.leader.substr(0, o.leader.rfind(':'));
  if (host == "127.0.0.1" || host == "localhost" || host == "[::1]") return "127.0.0.1";
  return "";  // Gloo resolves the hostname.
}

// Rank 0 of a site of several machines: forms the site's group, trains, and after a rank's failure
// leaves the federation, forms the group again and rejoins from its checkpoint.
absl::Status LeadSite(const SiteRun& run) {
  const SiteOptions& o = run.options;
  const SiteSetup& setup = run.setup;
  RunReport& report = run.report;
  const JobSpec& spec = setup.spec;
  const int machines = spec.sites[setup.index].machines;
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<RankLeader> leader,
                          RankLeader::Start({.spec = &spec,
                                             .view = &setup.view,
                                             .index = setup.index,
                                             .listen = o.leader,
                                             .tls = setup.tls,
                                             .deny_list = setup.deny_list,
                                             .collective_host = CollectiveHost(o)}));
  report.Print(absl::StrFormat("%s: leader of %d ranks, listening for them on %s", o.site_id,
                               machines, o.leader));
  const auto wait = std::chrono::milliseconds(static_cast<int64_t>(o.reconnect_timeout_s * 1000));
  bool resume = o.resume;
  uint32_t epoch = 0;
  for (;;) {
    // Ranks that never attach end the run; one that fails while the group forms is a rank
    // failure like any other.
    if (absl::Status formed = leader->FormGroup(wait); !formed.ok()) {
      if (formed.code() == absl::StatusCode::kDeadlineExceeded) return formed;
      report.Print(absl::StrFormat("%s: %s; forming the group again", o.site_id, formed.message()));
      leader->EndGroup(/*regroup=*/true);
      continue;
    }
    RankLeader* group = leader.get();
    auto factory = [&o, &setup,
                    group](LayerRange layers) -> absl::StatusOr<std::unique_ptr<StageExecutor>> {
      STRAIT_ASSIGN_OR_RETURN(const std::string keys, group->BuildFollowers(setup.total_steps));
      return MakeStageFactory(setup.spec, setup.index, setup.total_steps, o.threads,
                              {.rank = 0,
                               .ranks = group->ranks(),
                               .peers = group,
                               .group = group->group(),
                               .tensor_parallel = setup.spec.sites[setup.index].tensor_parallel,
                               .tensor = group->tensor_reducer(),
                               .store = &group->store(),
                               .nccl_prefix = keys})(layers);
    };
    absl::Status result = TrainSite(run, factory, resume, epoch, leader.get());
    const absl::Status rank_failure = leader->failure();
    if (result.ok() || rank_failure.ok()) {
      leader->EndGroup(/*regroup=*/false, result);  // Done, or stopped: the followers exit too.
      return result;
    }
    report.Print(absl::StrFormat(
        "%s: %s; the site left the federation and resumes from its checkpoint once every rank "
        "is attached again",
        o.site_id, rank_failure.message()));
    leader->EndGroup(/*regroup=*/true);
    resume = true;
  }
}

}  // namespace

absl::Status RunSite(const SiteOptions& o) {
  const auto process_start = std::chrono::steady_clock::now();
  STRAIT_ASSIGN_OR_RETURN(SiteSetup setup, LoadSetup(o));
  if (setup.spec.PlansSplit()) {
    PlannedSplitOptions plan{
        .dial = {.address = setup.spec.gateway.address, .site_id = o.site_id, .tls = setup.tls},
        .threads = o.threads,
        .cache_path =
            absl::StrCat(setup.spec.training.checkpoint.dir, "/", o.site_id, "/profile.json"),
        .profile_again = o.profile_again,
        .timeout = std::chrono::seconds(static_cast<int64_t>(o.reconnect_timeout_s))};
    STRAIT_ASSIGN_OR_RETURN(const plan::SplitChoice choice,
                            TakePlannedSplit(setup.spec, setup.index, plan));
    // Settled once, before anything runs: from here on the spec stays as it is.
    setup.spec = plan::WithPlannedInFlight(std::move(setup.spec), choice);
    setup.view = plan::WithSplit(choice, setup.view.replica);
  }
  const JobSpec& spec = setup.spec;
  const int stages = static_cast<int>(spec.sites.size());
  if (setup.teacher_stage >= 0) {
    RunReport report(setup.total_steps, spec.training.global_batch);
    STRAIT_ASSIGN_OR_RETURN(StageData data,
                            LoadStageData(spec, setup.teacher_stage == 0, /*last=*/false));
    const SiteRun run{.options = o,
                      .setup = setup,
                      .data = data,
                      .report = report,
                      .process_start = process_start};
    uint32_t epoch = 0;
    return TrainSite(run, MakeTeacherStageFactory(spec, setup.teacher_stage, o.threads), o.resume,
                     epoch);
  }
  if (setup.spec.sites[setup.index].machines > 1 && o.rank > 0) {
    return RunFollower({.spec = &spec,
                        .view = &setup.view,
                        .index = setup.index,
                        .rank = o.rank,
                        .threads = o.threads,
                        .leader = {.address = o.leader,
                                   .site_id = o.site_id,
                                   .tls = setup.tls,
                                   .deny_list = setup.deny_list},
                        .collective_host = CollectiveHost(o),
                        .reconnect_timeout_s = o.reconnect_timeout_s});
  }
  RunReport report(setup.total_steps, spec.training.global_batch);
  STRAIT_ASSIGN_OR_RETURN(StageData data,
                          LoadStageData(spec, setup.index == 0, setup.index == stages - 1));
  const SiteRun run{
      .options = o, .setup = setup, .data = data, .report = report, .process_start = process_start};
  if (setup.spec.sites[setup.index].machines > 1) return LeadSite(run);
  uint32_t epoch = 0;
  return TrainSite(run, MakeStageFactory(spec, setup.index, setup.total_steps, o.threads), o.resume,
                   epoch);
}

}  // namespace strait::site
