#include "gateway/daemon/run_gateway.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>

#include "core/frame_header.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "core/logging.h"
#include "crypto/deny_list.h"
#include "gateway/exchange/gateway_core.h"
#include "gateway/http/dashboard_server.h"
#include "gateway/rpc/gateway_server.h"
#include "gateway/rpc/revocation_list.h"
#include "plan/split_planner.h"

namespace strait::gateway {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(absl::string_view message, int code) {
  std::fprintf(stderr, "strait-gateway: %.*s\n", static_cast<int>(message.size()), message.data());
  return code;
}

// Loads tls.deny_list into a RevocationList, again whenever the file's modification time changes.
class DenyListReloader {
 public:
  explicit DenyListReloader(std::string path) : path_(std::move(path)) {}

  const std::shared_ptr<RevocationList>& revoked() const { return revoked_; }

  // Reloads the file if it changed (no-op without a deny list). On error the old list stays.
  absl::Status Reload() {
    std::error_code error;
    if (path_.empty()) return absl::OkStatus();
    const auto time = std::filesystem::last_write_time(path_, error);
    if (error || time == time_) return absl::OkStatus();
    absl::StatusOr<crypto::DenyList> list = crypto::DenyList::Load(path_);
    if (!list.ok()) return list.status();
    time_ = time;
    spdlog::info("deny list {}: {} revoked certificate(s)", path_, list->size());
    revoked_->Replace(*std::move(list));
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const std::shared_ptr<RevocationList> revoked_ = std::make_shared<RevocationList>();
  std::filesystem::file_time_type time_{};
};

// The job spec with the command line's overrides.
absl::StatusOr<JobSpec> LoadSpec(const GatewayDaemonOptions& options) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(options.config);
  if (!spec.ok()) return spec.status();
  if (!options.listen.empty()) spec->gateway.listen = options.listen;
  if (!options.dashboard_address.empty()) spec->dashboard.address = options.dashboard_address;
  return spec;
}

// How the gRPC server authenticates sites: the gateway's TLS material and the deny list.
absl::StatusOr<GatewayServerOptions> ServerOptions(const JobSpec& spec,
                                                   std::shared_ptr<const RevocationList> revoked,
                                                   std::shared_ptr<ServerHook> hook) {
  GatewayServerOptions options;
  options.listen = spec.gateway.listen;
  options.revoked = std::move(revoked);
  options.hook = std::move(hook);
  absl::StatusOr<crypto::TlsMaterial> material =
      crypto::LoadTlsMaterial(spec.tls.ca, spec.tls.gateway_cert, spec.tls.gateway_key);
  if (!material.ok()) {
    return absl::InvalidArgumentError(std::string(material.status().message()) +
                                      "\n(make certificates with `strait certs init` and `strait "
                                      "certs issue --gateway HOST`)");
  }
  options.tls = *std::move(material);
  return options;
}

// The dashboard's options: its address and the token from dashboard.token_file, if any.
absl::StatusOr<DashboardOptions> DashboardOptionsOf(const JobSpec& spec) {
  DashboardOptions options;
  options.address = spec.dashboard.address;
  if (!spec.dashboard.token_file.empty()) {
    std::ifstream in(spec.dashboard.token_file);
    std::getline(in, options.token);
    if (options.token.empty()) {
      return absl::InvalidArgumentError("dashboard.token_file " + spec.dashboard.token_file +
                                        " is missing or empty");
    }
  }
  return options;
}

// Written whole, then renamed, so that a reader never sees half a line.
void WriteReadyFile(const std::string& path, int grpc_port, int http_port) {
  std::ofstream(path + ".tmp") << "grpc=" << grpc_port << "\nhttp=" << http_port << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Sleeps until SIGINT or SIGTERM (OnSignal), reloading the deny list every 2 seconds.
void WaitForSignal(DenyListReloader& deny_list) {
  for (int tick = 0; !g_stop; ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (tick % 20 == 0) {
      if (absl::Status s = deny_list.Reload(); !s.ok())
        spdlog::error("keeping the old deny list: {}", std::string(s.message()));
    }
  }
}

}  // namespace

void AddGatewayFlags(CLI::App& app, GatewayDaemonOptions& options) {
  app.add_option("-c,--config", options.config, "Job spec (federation YAML)")
      ->required()
      ->type_name("FILE");
  app.add_option("--listen", options.listen,
                 "Override gateway.listen (host:port; port 0 picks a free one)");
  app.add_option("--dashboard", options.dashboard_address,
                 "Override dashboard.address (host:port; port 0 picks a free one)");
  app.add_flag("--no-dashboard", options.no_dashboard,
               "Serve no dashboard, /metrics or /api/state");
  app.add_option("--ready-file", options.ready_file,
                 "Write 'grpc=PORT' and 'http=PORT' to FILE once serving (for scripts and tests)");
  app.add_option("--log-level", options.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
}

int RunGateway(const GatewayDaemonOptions& options) {
  if (absl::Status s = SetupLogging("gateway", options.log_level); !s.ok())
    return Fail(s.message(), 2);
  absl::StatusOr<JobSpec> spec = LoadSpec(options);
  if (!spec.ok()) return Fail(spec.status().message(), 2);
  DenyListReloader deny_list(spec->tls.deny_list);
  if (absl::Status s = deny_list.Reload(); !s.ok()) return Fail(s.message(), 2);
  absl::StatusOr<GatewayServerOptions> server_options =
      ServerOptions(*spec, deny_list.revoked(), options.server_hook);
  if (!server_options.ok()) return Fail(server_options.status().message(), 2);

  // With layers: auto the split is planned first (split_planning.h): the server answers Plan and
  // Probe until every site's profile is in, and the core serves the planned spec from then on.
  std::unique_ptr<SplitPlanning> planning;
  if (spec->PlansSplit()) planning = std::make_unique<SplitPlanning>(*spec);
  std::unique_ptr<GatewayCore> core;
  std::atomic<GatewayCore*> serving{nullptr};
  auto make_core = [&](const JobSpec& job, const JobView& view) {
    GatewayOptions core_options;
    core_options.max_frame_bytes = MaxFrameWireBytes(job);
    core = std::make_unique<GatewayCore>(job, view, core_options);
  };
  if (!planning) make_core(*spec, JobView::Initial(*spec));
  absl::StatusOr<std::unique_ptr<GatewayServer>> server =
      GatewayServer::Start(core.get(), planning.get(), *server_options);
  if (!server.ok()) {
    return Fail(server.status().message(),
                server.status().code() == absl::StatusCode::kUnavailable ? 1 : 2);
  }
  serving.store(core.get());
  spdlog::info("federation {}: serving {} sites on port {} (mutual TLS)", spec->name,
               spec->MemberSlots(), (*server)->port());

  std::unique_ptr<DashboardServer> dashboard;
  if (!options.no_dashboard) {
    absl::StatusOr<DashboardOptions> dashboard_options = DashboardOptionsOf(*spec);
    if (!dashboard_options.ok()) return Fail(dashboard_options.status().message(), 2);
    auto snapshot = [&serving, &planning] {
      v1::FederationState state;
      if (GatewayCore* c = serving.load()) state = c->Snapshot();
      if (planning) {
        for (const std::string& line : planning->Description()) state.add_plan(line);
      }
      return state;
    };
    auto started = DashboardServer::Start(*dashboard_options, snapshot);
    if (!started.ok()) return Fail("dashboard: " + std::string(started.status().message()), 1);
    dashboard = *std::move(started);
    spdlog::info("dashboard: http://{}:{}/{}",
                 spec->dashboard.address.substr(0, spec->dashboard.address.rfind(':')),
                 dashboard->port(), dashboard_options->token.empty() ? "" : " (token required)");
  }
  if (!options.ready_file.empty()) {
    WriteReadyFile(options.ready_file, (*server)->port(), dashboard ? dashboard->port() : 0);
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // The spec the core serves once planned: the file's with the planned extra_in_flight, settled
  // once (a re-plan moves only layers).
  std::optional<JobSpec> planned;
  if (planning) {
    spdlog::info("{}", planning->Description().front());
    absl::StatusOr<plan::SplitChoice> plan = planning->WaitForPlan([] { return g_stop != 0; });
    if (!plan.ok() && plan.status().code() != absl::StatusCode::kCancelled) {
      std::this_thread::sleep_for(std::chrono::seconds(2));  // The sites get the error first.
      return Fail(plan.status().message(), 2);
    }
    if (plan.ok()) {
      planned = plan::WithPlannedInFlight(*spec, *plan);
      make_core(*planned, plan::WithSplit(*plan));
      // A site that rejoins at another speed may change the split: the federation's next Rollback
      // gives every site its new layers, and they move them first.
      GatewayCore* attached = core.get();
      planning->OnReplan([attached](const std::vector<LayerRange>& split) {
        if (absl::Status s = attached->federation().SetSplit(split); !s.ok()) {
          spdlog::error("cannot take the new split: {}", std::string(s.message()));
        }
      });
      (*server)->Attach(*core);
      serving.store(core.get());
    }
  }
  WaitForSignal(deny_list);
  spdlog::info("stopping");
  (*server)->Shutdown(std::chrono::seconds(2));
  return 0;
}

}  // namespace strait::gateway
