#include "site/daemon/site_daemon.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cpu_time.h"
#include "core/job_spec.h"
#include "core/join_request.h"
#include "core/logging.h"
#include "core/status.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "site/daemon/checkpoint_store.h"
#include "site/daemon/neighbour_keys.h"
#include "site/daemon/training_control.h"
#include "site/exchange/link_security.h"
#include "site/pipeline/site_runner.h"
#include "site/pipeline/stage_checkpoint.h"
#include "site/rpc/gateway_client.h"
#include "site/rpc/tls_credentials.h"

namespace strait::site {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// What the progress lines, the reports and the summary share; written by the training thread.
struct Progress {
  std::mutex mu;
  int64_t step = 0;
  uint32_t generation = 0;
  std::optional<int64_t> checkpoint;  // Newest checkpoint written or resumed from.
  std::optional<double> loss;
  double samples_per_second = 0.0;
  double eta_s = 0.0;
};

// Sends a SiteReport every `interval` (and once more on destruction) with the figures of the
// interval since the previous one. After MarkFinished() the last report tells the gateway that the
// site completed its job, so the end of its stream is not taken for a failure.
class Reporter {
 public:
  Reporter(std::function<void(const v1::SiteReport&)> send, SiteMetrics& metrics,
           Progress& progress, double interval_s)
      : send_(std::move(send)), metrics_(metrics), progress_(progress), interval_(interval_s) {
    thread_ = std::thread([this] { Run(); });
  }
  void MarkFinished() { finished_ = true; }
  // Sends a report now (e.g. the first step of a new generation: the gateway measures recovery).
  void SendSoon() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      soon_ = true;
    }
    cv_.notify_all();
  }
  ~Reporter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    Send();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait_for(lock, std::chrono::duration<double>(interval_),
                   [this] { return stop_ || soon_; });
      if (stop_) return;
      soon_ = false;
      lock.unlock();
      Send();
      lock.lock();
    }
  }
  void Send() {
    const SiteMetrics::Totals now = metrics_.Snapshot();
    const SiteMetrics::Totals delta = SiteMetrics::Difference(now, previous_);
    previous_ = now;
    v1::SiteReport report;
    {
      std::lock_guard<std::mutex> lock(progress_.mu);
      report.set_step(static_cast<uint64_t>(progress_.step));
      if (progress_.loss) {
        report.set_has_loss(true);
        report.set_loss(*progress_.loss);
      }
      report.set_samples_per_second(progress_.samples_per_second);
      report.set_eta_s(progress_.eta_s);
      report.set_generation(progress_.generation);
      if (progress_.checkpoint) {
        report.set_has_checkpoint(true);
        report.set_checkpoint_step(static_cast<uint64_t>(*progress_.checkpoint));
      }
    }
    report.set_compute_s(delta.Seconds(Timer::kCompute));
    report.set_wait_s(delta.Seconds(Timer::kWait));
    report.set_encode_s(delta.Seconds(Timer::kEncode));
    report.set_decode_s(delta.Seconds(Timer::kDecode));
    report.set_seal_s(delta.Seconds(Timer::kSeal));
    report.set_open_s(delta.Seconds(Timer::kOpen));
    for (const v1::LinkBytes& l : delta.links) *report.add_links() = l;
    report.set_rejected_frames(now.rejected_frames);  // A running total (the gateway shows it).
    report.set_finished(finished_);
    send_(report);
  }

  const std::function<void(const v1::SiteReport&)> send_;
  SiteMetrics& metrics_;
  Progress& progress_;
  const double interval_;
  SiteMetrics::Totals previous_;  // Used by the reporting thread, then by the destructor.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool soon_ = false;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

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

// The job spec with the command line's overrides applied, and this site's index in it.
absl::StatusOr<std::pair<JobSpec, int>> LoadSpec(const SiteOptions& o) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(o.config);
  if (!spec.ok()) return Invalid(std::string(spec.status().message()));
  const int index = spec->SiteIndex(o.site_id);
  if (index < 0) {
    std::string ids;
    for (const SiteSpec& s : spec->sites) ids += (ids.empty() ? "" : ", ") + s.id;
    return Invalid(absl::StrCat(o.config, ": no site '", o.site_id, "'; the sites are ", ids));
  }
  if (o.steps > 0) {
    spec->training.steps = o.steps;
    spec->training.epochs = 0;
  }
  if (!o.gateway.empty()) spec->gateway.address = o.gateway;
  return std::make_pair(*std::move(spec), index);
}

// Loads what this stage reads of the data set (DESIGN.md §1: data stays at its site).
absl::StatusOr<StageData> LoadStageData(const JobSpec& spec, bool first, bool last) {
  StageData data;
  if (first || last) {
    STRAIT_ASSIGN_OR_RETURN(Dataset train, LoadDataset(spec.data, spec.model, Split::kTrain));
    STRAIT_ASSIGN_OR_RETURN(Dataset test, LoadDataset(spec.data, spec.model, Split::kTest));
    if (train.size < spec.training.global_batch) {
      return Invalid(absl::StrCat("the training set has ", train.size,
                                  " samples, fewer than one global batch of ",
                                  spec.training.global_batch));
    }
    data.test_size = test.size;
    data.train = std::make_shared<const Dataset>(std::move(train));
    data.test = std::make_shared<const Dataset>(std::move(test));
  } else {
    STRAIT_ASSIGN_OR_RETURN(data.test_size, DatasetSize(spec.data, Split::kTest));
  }
  return data;
}

nlohmann::json LinksJson(const std::vector<v1::LinkBytes>& links) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::LinkBytes& l : links) {
    out.push_back({{"boundary", l.boundary()},
                   {"direction", l.direction() == v1::FORWARD ? "forward" : "backward"},
                   {"sent", l.sent()},
                   {"raw_bytes", l.raw_bytes()},
                   {"wire_bytes", l.wire_bytes()},
                   {"frames", l.frames()}});
  }
  return out;
}

// The four link directions of this stage for `generation`: codecs from the job spec, link keys
// derived from the neighbours' current signed keys and the generation.
absl::StatusOr<StageLinks> BuildLinks(const JobSpec& spec, int index, GatewayClient& client,
                                      LinkSecurity* security,
                                      std::map<std::string, v1::SignedKey>& peer_keys,
                                      uint32_t generation, SiteMetrics& metrics, int window,
                                      uint64_t max_raw) {
  const int stages = static_cast<int>(spec.sites.size());
  const LinkSpec* link_in = index == 0 ? nullptr : &spec.links[index - 1];
  const LinkSpec* link_out = index == stages - 1 ? nullptr : &spec.links[index];
  auto crypto_with = [&](const LinkSpec& link,
                         int peer) -> absl::StatusOr<LinkSecurity::LinkCrypto> {
    if (!link.encryption) return LinkSecurity::LinkCrypto{};
    const std::string& id = spec.sites[peer].id;
    absl::StatusOr<LinkSecurity::LinkCrypto> c =
        security->Derive(id, peer_keys[id], link.rotate_bytes, generation);
    if (!c.ok()) {
      return absl::Status(
          c.status().code(),
          absl::StrCat("the key of neighbour ", id, " does not verify: ", c.status().message()));
    }
    return c;
  };
  StageLinks links;
  if (link_in) {
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, crypto_with(*link_in, index - 1));
    STRAIT_ASSIGN_OR_RETURN(auto encoder,
                            FrameEncoder::Create(link_in->backward, std::move(c.sealer)));
    links.backward_out = std::make_unique<FrameSender>(client, std::move(encoder), index - 1,
                                                       v1::BACKWARD, metrics, window);
    links.forward_in = std::make_unique<FrameReceiver>(
        client, std::make_unique<FrameDecoder>(std::move(c.opener), max_raw),
        spec.sites[index - 1].id, index - 1, v1::FORWARD, metrics, window);
  }
  if (link_out) {
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, crypto_with(*link_out, index + 1));
    STRAIT_ASSIGN_OR_RETURN(auto encoder,
                            FrameEncoder::Create(link_out->forward, std::move(c.sealer)));
    links.forward_out = std::make_unique<FrameSender>(client, std::move(encoder), index,
                                                      v1::FORWARD, metrics, window);
    links.backward_in = std::make_unique<FrameReceiver>(
        client, std::make_unique<FrameDecoder>(std::move(c.opener), max_raw),
        spec.sites[index + 1].id, index, v1::BACKWARD, metrics, window);
  }
  return links;
}

}  // namespace

absl::Status RunSite(const SiteOptions& o) {
  const auto process_start = Clock::now();
  STRAIT_ASSIGN_OR_RETURN(auto loaded, LoadSpec(o));
  const JobSpec& spec = loaded.first;
  const int index = loaded.second;
  const int stages = static_cast<int>(spec.sites.size());
  const SiteSpec& site = spec.sites[index];
  const bool first = index == 0, last = index == stages - 1;
  const LinkSpec* link_in = first ? nullptr : &spec.links[index - 1];  // With the previous stage.
  const LinkSpec* link_out = last ? nullptr : &spec.links[index];      // With the next stage.
  const bool sealed = (link_in && link_in->encryption) || (link_out && link_out->encryption);
  if (o.threads < 1) return Invalid("--threads must be at least 1");

  // Identity: the certificate authenticates the gRPC channel and signs this epoch's link key.
  std::optional<crypto::TlsMaterial> tls;
  if (!o.insecure || sealed) {
    STRAIT_ASSIGN_OR_RETURN(tls, LoadSiteTls(o, spec));
  }
  crypto::DenyList deny_list;
  if (!spec.tls.deny_list.empty()) {
    STRAIT_ASSIGN_OR_RETURN(deny_list, crypto::DenyList::Load(spec.tls.deny_list));
  }
  int64_t total = spec.training.steps;
  if (total == 0) {
    STRAIT_ASSIGN_OR_RETURN(int64_t train_size, DatasetSize(spec.data, Split::kTrain));
    total = int64_t{spec.training.epochs} * (train_size / spec.training.global_batch);
  }
  const OptimizerSpec optimizer = WithDecayHorizon(spec.training.optimizer, total);
  // The stage (rebuilt for every generation) and, with --resume, the checkpoint it can resume from.
  auto build_stage = [&] {
    return StageExecutor::Create(
        spec.model, site.layers, optimizer, spec.training.MicrobatchSize(),
        VersioningOf(spec.training),
        {.device = site.device, .count = site.workers, .threads = o.threads});
  };
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<StageExecutor> stage, build_stage());
  spdlog::info("{} worker(s): {}", site.workers, stage->device_names());
  CheckpointStore checkpoints(spec, o.site_id);
  Progress progress;
  if (o.resume) {
    absl::StatusOr<int64_t> newest = checkpoints.NewestValid(*stage);
    if (newest.ok()) {
      spdlog::info(
          "can resume from {} (the federation resumes from the newest step every site has)",
          checkpoints.PathFor(*newest));
      progress.checkpoint = *newest;
    } else {
      spdlog::warn("--resume: {}; starting from the initial parameters",
                   std::string(newest.status().message()));
    }
  }

  // Control messages arrive on the client's thread from the moment it joins.
  NeighbourKeys keys;
  TrainingControl control;
  auto on_control = [&](const v1::Control& c) {
    if (control.Handle(c)) return;
    switch (c.kind_case()) {
      case v1::Control::kNeighbourKey:
        keys.Add(c.neighbour_key());
        break;
      case v1::Control::kSiteDown:
        spdlog::warn("site {} is down", c.site_down().site_id());
        break;
      default:
        spdlog::warn("control message {} is not handled by this version", c.kind_case());
        break;
    }
  };

  GatewayClient::Options client_options;
  client_options.address = spec.gateway.address;
  client_options.chunk_bytes = spec.gateway.chunk_size;
  if (o.insecure) {
    client_options.credentials = grpc::InsecureChannelCredentials();
    client_options.insecure_site_id = o.site_id;
  } else {
    client_options.credentials = MakeSiteChannelCredentials(*tls);
  }
  client_options.on_control = on_control;
  client_options.on_disconnect = [&](const absl::Status& status) { control.Disconnected(status); };

  // Every join is a new epoch with a fresh ephemeral link key (the gateway refuses older epochs),
  // offering the newest checkpoint this site holds.
  std::unique_ptr<LinkSecurity> security;
  std::mutex client_mu;  // Guards `client` for the reporter's thread.
  std::unique_ptr<GatewayClient> client;
  uint32_t epoch = 0;
  auto join_gateway = [&]() -> absl::Status {
    const auto now_s =
        static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    epoch = std::max(now_s, epoch + 1);
    v1::SignedKey own_key = UnsignedKey(o.site_id, epoch);
    if (tls) {
      STRAIT_ASSIGN_OR_RETURN(
          security, LinkSecurity::Create(spec.name, epoch, tls->own, tls->ca_pem, deny_list));
      own_key = security->own_key();
    }
    v1::JoinRequest join = JoinRequestFor(spec, index, own_key);
    join.set_total_steps(static_cast<uint64_t>(total));
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      if (progress.checkpoint) {
        join.set_has_checkpoint(true);
        join.set_checkpoint_step(static_cast<uint64_t>(*progress.checkpoint));
      }
    }
    control.Reconnected();
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<GatewayClient> joined,
                            GatewayClient::Connect(client_options, join));
    for (const v1::SignedKey& k : joined->join_reply().neighbour_keys()) keys.Add(k);
    std::lock_guard<std::mutex> lock(client_mu);
    client = std::move(joined);
    return absl::OkStatus();
  };
  // After a lost connection: join again with backoff and jitter, for at most --reconnect-timeout.
  auto rejoin_gateway = [&]() -> absl::Status {
    {
      std::lock_guard<std::mutex> lock(client_mu);
      client.reset();
    }
    const auto give_up = Clock::now() + std::chrono::duration<double>(o.reconnect_timeout_s);
    std::mt19937 random(std::random_device{}());
    double backoff_s = 0.25;
    absl::Status last;
    while (Clock::now() < give_up) {
      last = join_gateway();
      if (last.ok()) {
        spdlog::info("joined the gateway at {} again (epoch {})", spec.gateway.address, epoch);
        return absl::OkStatus();
      }
      backoff_s = std::min(backoff_s * 2, 8.0);
      const double wait_s = backoff_s * std::uniform_real_distribution<double>(0.5, 1.0)(random);
      spdlog::warn("cannot reach the gateway at {} ({}); trying again in {:.1f} s",
                   spec.gateway.address, std::string(last.message()), wait_s);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    }
    std::optional<int64_t> checkpoint;
    {
      std::lock_guard<std::mutex> lock(progress.mu);
      checkpoint = progress.checkpoint;
    }
    return absl::UnavailableError(absl::StrCat(
        "lost the gateway at ", spec.gateway.address, " and could not join it again within ",
        o.reconnect_timeout_s, " s (", last.message(), "). ",
        checkpoint
            ? absl::StrCat("The checkpoint of step ", *checkpoint, " is in ", checkpoints.dir(),
                           ": start this site again with --resume once the gateway is back")
            : std::string("No checkpoint was written: the run starts over")));
  };

  spdlog::info("stage {} of {} (layers [{}, {})), joining the gateway at {}", index, stages,
               site.layers.start, site.layers.end, spec.gateway.address);
  STRAIT_RETURN_IF_ERROR(join_gateway());
  STRAIT_ASSIGN_OR_RETURN(StageData data, LoadStageData(spec, first, last));

  std::vector<std::string> peers;
  if (link_in && link_in->encryption) peers.push_back(spec.sites[index - 1].id);
  if (link_out && link_out->encryption) peers.push_back(spec.sites[index + 1].id);

  SiteMetrics metrics;
  // Prefetch and send-ahead as deep as any stage keeps microbatches in flight (+1 for the clipping
  // frame): a link carries as many frames at once as its deeper producer or consumer holds (stage 0
  // may hold many more than the last stage with extra_in_flight), and a shallower window would
  // allow only that many frames per link round trip. The gateway's memory budget still bounds what
  // is stored.
  int window = 0;
  for (int s = 0; s < stages; ++s) {
    window = std::max(window, MaxInFlight(StageSchedule(spec.training.schedule, stages, s,
                                                        spec.training.microbatches,
                                                        spec.training.extra_in_flight)) +
                                  1);
  }
  const int64_t mb = spec.training.MicrobatchSize();
  const uint64_t max_raw =
      static_cast<uint64_t>(mb) * std::max(stage->input_features(), stage->output_features()) * 4;

  std::vector<double> losses;  // losses[i]: the loss of step losses_from + i (last stage).
  int64_t losses_from = -1;
  double train_seconds = 0.0;
  double train_cpu_seconds = 0.0;  // This process's CPU time (all threads) over the same loops.
  std::optional<double> accuracy;
  absl::Status result;
  int64_t steps_done = 0;
  // The steady state, for benchmarks: from the end of the first step to the end of the last, less
  // that step's drain (StepResult::drain_s), so that neither the pipeline's fill (in the first
  // step) nor its drain (the stages end their last step at different times) counts in the period.
  std::optional<Clock::time_point> first_step_end;
  Clock::time_point last_step_end;
  {
    Reporter reporter(
        [&](const v1::SiteReport& report) {
          std::lock_guard<std::mutex> lock(client_mu);
          if (client != nullptr) client->Report(report);
        },
        metrics, progress, o.report_interval_s);
    std::printf("%s: stage %d of %d, layers [%d, %d), %lld steps\n", o.site_id.c_str(), index,
                stages, site.layers.start, site.layers.end, static_cast<long long>(total));
    std::fflush(stdout);
    // One pass per generation: the gateway's Rollback says from which checkpoint; a Pause (a site
    // went down) or a newer Rollback ends the pass, and the next one starts over from there.
    while (true) {
      absl::StatusOr<v1::Rollback> begin = control.WaitForStart(std::chrono::seconds(10), [] {
        spdlog::info("waiting for the gateway to start training (every site must be joined)");
      });
      if (!begin.ok() && begin.status().code() == absl::StatusCode::kUnavailable) {
        spdlog::warn("lost the gateway: {}; joining it again",
                     std::string(begin.status().message()));
        result = rejoin_gateway();
        if (!result.ok()) break;
        continue;
      }
      if (!begin.ok()) {
        result = begin.status();
        break;
      }
      const auto from = static_cast<int64_t>(begin->step());
      const uint32_t generation = begin->generation();
      if (from > total) {
        result = absl::FailedPreconditionError(absl::StrCat("the federation resumes at step ", from,
                                                            ", past this job's ", total, " steps"));
        break;
      }
      STRAIT_ASSIGN_OR_RETURN(stage, build_stage());
      if (from > 0) STRAIT_RETURN_IF_ERROR(checkpoints.Load(from, *stage));
      spdlog::info("training from {} (generation {})",
                   from == 0 ? std::string("the initial parameters") : checkpoints.PathFor(from),
                   generation);
      STRAIT_ASSIGN_OR_RETURN(
          auto peer_keys, keys.WaitFor(peers, std::chrono::minutes(10), std::chrono::seconds(10),
                                       [](const std::string& missing) {
                                         spdlog::info("waiting for the key of {}", missing);
                                       }));
      STRAIT_ASSIGN_OR_RETURN(
          StageLinks links, BuildLinks(spec, index, *client, security.get(), peer_keys, generation,
                                       metrics, window, max_raw));
      SiteRunner runner(spec, index, *stage, std::move(links), data, metrics, total, from,
                        generation);
      control.SetActive(&runner);
      // Losses of the steps replayed from here on replace the ones of the abandoned generation.
      if (losses_from < 0 || from < losses_from) {
        losses_from = from;
        losses.clear();
      }
      losses.resize(std::min<size_t>(losses.size(), static_cast<size_t>(from - losses_from)));
      {
        std::lock_guard<std::mutex> lock(progress.mu);
        progress.generation = generation;
      }
      // Training time counts the step loops only (as `strait train` does), not the waits for the
      // other sites to join and for the gateway's start.
      const auto start = Clock::now();
      const double trained_before = train_seconds;
      const double cpu_at_start = ProcessCpuSeconds();
      auto window_start = start;
      int64_t window_steps = 0;
      int64_t saved_through = from;  // Newest checkpoint of this pass (or the one it resumed from).
      result = absl::OkStatus();
      while (result.ok() && runner.step() < total) {
        absl::StatusOr<StepResult> step = runner.Step();
        if (!step.ok()) {
          result = step.status();
          break;
        }
        ++steps_done;
        const auto now = Clock::now();
        if (!first_step_end) first_step_end = now;
        last_step_end = now - std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(step->drain_s));
        ++window_steps;
        if (step->loss) losses.push_back(*step->loss);
        if (runner.step() == from + 1) {
          reporter.SendSoon();
          if (from > 0) {
            spdlog::info("training again from step {}, {:.1f} s after this process started", from,
                         Seconds(process_start, now));
          }
        }
        // Checkpoint k holds the state right after the update that made L_k: after Step(k - 1)
        // with 1f1b and eager 2bw, after Step(k) with deferred 2bw (SiteRunner::updates()).
        if (const int64_t k = runner.updates(); k > saved_through && checkpoints.Due(k)) {
          result = checkpoints.Save(k, *stage);
          if (!result.ok()) break;
          saved_through = k;
          {
            std::lock_guard<std::mutex> lock(progress.mu);
            progress.checkpoint = k;
          }
          reporter.SendSoon();  // The gateway's common checkpoint is what a recovery starts from.
        }
        const double elapsed = trained_before + Seconds(start, now);
        const double rate = steps_done * spec.training.global_batch / std::max(elapsed, 1e-9);
        {
          std::lock_guard<std::mutex> lock(progress.mu);
          progress.step = runner.step();
          progress.loss = step->loss;
          progress.samples_per_second = rate;
          progress.eta_s =
              (total - runner.step()) * spec.training.global_batch / std::max(rate, 1e-9);
        }
        if (Seconds(window_start, now) >= 2.0 || runner.step() == total ||
            runner.step() == from + 1) {
          const double window_rate = window_steps * spec.training.global_batch /
                                     std::max(Seconds(window_start, now), 1e-9);
          std::printf("step %6lld/%lld%s  %.0f samples/s  ETA %s\n",
                      static_cast<long long>(runner.step()), static_cast<long long>(total),
                      step->loss
                          ? absl::StrCat("  loss ", absl::StrFormat("%.4f", *step->loss)).c_str()
                          : "",
                      window_rate, FormatDuration(progress.eta_s).c_str());
          std::fflush(stdout);
          window_start = now;
          window_steps = 0;
        }
      }
      train_seconds = trained_before + Seconds(start, Clock::now());
      train_cpu_seconds += ProcessCpuSeconds() - cpu_at_start;
      if (result.ok() && o.evaluate) {
        absl::StatusOr<std::optional<double>> evaluated = runner.Evaluate();
        if (evaluated.ok()) {
          accuracy = *evaluated;
        } else {
          result = evaluated.status();
        }
      }
      if (result.ok()) result = runner.Flush();
      control.SetActive(nullptr);
      if (!result.ok() && control.Interrupted()) {
        spdlog::warn("training interrupted at step {}: {}; waiting for the gateway's rollback",
                     runner.step(), control.interruption());
        std::printf("interrupted at step %lld: %s\n", static_cast<long long>(runner.step()),
                    control.interruption().c_str());
        std::fflush(stdout);
        continue;
      }
      break;
    }
    if (result.ok()) reporter.MarkFinished();
  }
  const double samples_per_second =
      steps_done * spec.training.global_batch / std::max(train_seconds, 1e-9);
  const double steady_samples_per_second =
      steps_done >= 2 ? (steps_done - 1) * spec.training.global_batch /
                            std::max(Seconds(*first_step_end, last_step_end), 1e-9)
                      : samples_per_second;
  if (accuracy) {
    std::printf("test accuracy %.2f%% after %lld steps; %.0f samples/s\n", 100 * *accuracy,
                static_cast<long long>(total), samples_per_second);
    std::fflush(stdout);
  }

  if (result.ok() && !o.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out, ec);
    if (ec) return absl::InternalError("cannot create --out " + o.out + ": " + ec.message());
    STRAIT_RETURN_IF_ERROR(SaveStageCheckpoint(o.out + "/final.ckpt", spec, *stage, total));
    const SiteMetrics::Totals totals = metrics.Snapshot();
    nlohmann::json summary = {{"site", o.site_id},
                              {"stage", index},
                              {"steps", total},
                              {"samples_per_second", samples_per_second},
                              {"steady_samples_per_second", steady_samples_per_second},
                              {"train_seconds", train_seconds},
                              {"train_cpu_seconds", train_cpu_seconds},
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
                                {"update_s", totals.Seconds(Timer::kUpdate)}}}};
    if (last) {
      summary["loss"] = losses;
      summary["loss_first_step"] = losses_from;
    }
    if (accuracy) summary["test_accuracy"] = *accuracy;
    std::ofstream(o.out + "/metrics.json") << summary.dump(1) << "\n";
  }
  if (client != nullptr) {
    absl::Status closed = client->Close();
    if (!closed.ok() && result.ok()) spdlog::debug("stream closed: {}", closed.ToString());
  }
  return result;
}

}  // namespace strait::site
