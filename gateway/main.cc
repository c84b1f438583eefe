// strait-gateway: routes sealed activations and gradients between the sites of a federation
// (DESIGN.md §1): the gRPC Gateway service over mutual TLS, the mailbox, membership and metrics.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/command_line.h"
#include "core/frame_header.h"
#include "core/job_spec.h"
#include "core/logging.h"
#include "core/malloc_tuning.h"
#include "core/mutex_tuning.h"
#include "core/version.h"
#include "crypto/deny_list.h"
#include "gateway/exchange/gateway_core.h"
#include "gateway/http/dashboard_server.h"
#include "gateway/rpc/gateway_service.h"
#include "gateway/rpc/tls_credentials.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "strait-gateway: %s\n", message.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  strait::KeepFreedMemoryForReuse();
  strait::SkipMutexDeadlockDetection();
  CLI::App app{
      "strait-gateway: routes sealed activations and gradients between the sites of a "
      "federation and serves its dashboard."};
  app.set_version_flag("--version", "strait-gateway " STRAIT_VERSION);
  std::string config, listen, dashboard_address, ready_file, log_level = "info";
  bool insecure = false, no_dashboard = false;
  app.add_option("-c,--config", config, "Job spec (federation YAML)")
      ->required()
      ->type_name("FILE");
  app.add_option("--listen", listen,
                 "Override gateway.listen (host:port; port 0 picks a free one)");
  app.add_option("--dashboard", dashboard_address,
                 "Override dashboard.address (host:port; port 0 picks a free one)");
  app.add_flag("--no-dashboard", no_dashboard, "Serve no dashboard, /metrics or /api/state");
  app.add_flag("--insecure", insecure,
               "Plaintext gRPC without certificates; sites name themselves. For local tests only");
  app.add_option("--ready-file", ready_file,
                 "Write 'grpc=PORT' and 'http=PORT' to FILE once serving (for scripts and tests)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  uint64_t test_tamper_frame = 0;  // Hidden: fault injection for the end-to-end security test.
  app.add_option("--test-tamper-frame", test_tamper_frame)->group("");
  if (std::optional<int> code = strait::ParseCommandLine(app, argc, argv)) return *code;
  if (absl::Status s = strait::SetupLogging("gateway", log_level); !s.ok())
    return Fail(std::string(s.message()), 2);

  absl::StatusOr<strait::JobSpec> spec = strait::LoadJobSpec(config);
  if (!spec.ok()) return Fail(std::string(spec.status().message()), 2);
  if (!listen.empty()) spec->gateway.listen = listen;
  if (!dashboard_address.empty()) spec->dashboard.address = dashboard_address;

  // Revoked certificates (tls.deny_list), reloaded whenever the file changes.
  auto revoked = std::make_shared<strait::gateway::RevocationList>();
  std::filesystem::file_time_type deny_list_time{};
  auto reload_deny_list = [&]() -> absl::Status {
    const std::string& path = spec->tls.deny_list;
    std::error_code error;
    if (path.empty()) return absl::OkStatus();
    const auto time = std::filesystem::last_write_time(path, error);
    if (error || time == deny_list_time) return absl::OkStatus();
    absl::StatusOr<strait::crypto::DenyList> list = strait::crypto::DenyList::Load(path);
    if (!list.ok()) return list.status();
    deny_list_time = time;
    spdlog::info("deny list {}: {} revoked certificate(s)", path, list->size());
    revoked->Replace(*std::move(list));
    return absl::OkStatus();
  };
  if (absl::Status s = reload_deny_list(); !s.ok()) return Fail(std::string(s.message()), 2);

  std::shared_ptr<grpc::ServerCredentials> credentials;
  strait::gateway::PeerIdentity identity;
  if (insecure) {
    spdlog::warn(
        "INSECURE: plaintext gRPC, no certificates; sites are not authenticated. Never use "
        "--insecure outside a test on one machine.");
    credentials = grpc::InsecureServerCredentials();
    identity = strait::gateway::ClaimedIdentity;
  } else {
    absl::StatusOr<strait::crypto::TlsMaterial> material = strait::crypto::LoadTlsMaterial(
        spec->tls.ca, spec->tls.gateway_cert, spec->tls.gateway_key);
    if (!material.ok()) {
      return Fail(std::string(material.status().message()) +
                      "\n(make certificates with `strait certs init` and `strait certs issue "
                      "--gateway HOST`)",
                  2);
    }
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls =
        strait::gateway::MakeGatewayServerCredentials(*material, revoked);
    if (!tls.ok()) return Fail(std::string(tls.status().message()), 2);
    credentials = *tls;
    identity = [](const grpc::CallbackServerContext& context) {
      return strait::gateway::PeerSiteId(context);
    };
  }

  strait::gateway::GatewayOptions options;
  options.insecure = insecure;
  options.max_frame_bytes = strait::MaxFrameWireBytes(*spec);
  options.test_tamper_frame = test_tamper_frame;
  strait::gateway::GatewayCore core(*spec, options);
  strait::gateway::GatewayService service(core, identity);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(spec->gateway.listen, credentials, &port);
  builder.RegisterService(&service);
  // A chunk carries at most 1 MiB of body plus its header. Messages up to 4 MiB are read so that an
  // oversized chunk is answered with an error on a healthy stream; larger ones end the stream.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(static_cast<int>(strait::kMaxChunkBytes + (64 << 10)));

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail("cannot listen on " + spec->gateway.listen + " (address in use or not local?)");
  }
  spdlog::info("federation {}: serving {} sites on port {}{}", spec->name, spec->sites.size(), port,
               insecure ? " (INSECURE)" : " (mutual TLS)");

  std::unique_ptr<strait::gateway::DashboardServer> dashboard;
  if (!no_dashboard) {
    strait::gateway::DashboardOptions dashboard_options;
    dashboard_options.address = spec->dashboard.address;
    if (!spec->dashboard.token_file.empty()) {
      std::ifstream in(spec->dashboard.token_file);
      std::getline(in, dashboard_options.token);
      if (dashboard_options.token.empty()) {
        return Fail("dashboard.token_file " + spec->dashboard.token_file + " is missing or empty",
                    2);
      }
    }
    auto started = strait::gateway::DashboardServer::Start(dashboard_options,
                                                           [&core] { return core.Snapshot(); });
    if (!started.ok()) return Fail("dashboard: " + std::string(started.status().message()));
    dashboard = *std::move(started);
    spdlog::info("dashboard: http://{}:{}/{}",
                 spec->dashboard.address.substr(0, spec->dashboard.address.rfind(':')),
                 dashboard->port(), dashboard_options.token.empty() ? "" : " (token required)");
  }
  if (!ready_file.empty()) {
    // Written whole, then renamed, so a reader never sees half a line.
    std::ofstream(ready_file + ".tmp")
        << "grpc=" << port << "\nhttp=" << (dashboard ? dashboard->port() : 0) << "\n";
    std::rename((ready_file + ".tmp").c_str(), ready_file.c_str());
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  for (int tick = 0; !g_stop; ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (tick % 20 == 0) {
      if (absl::Status s = reload_deny_list(); !s.ok())
        spdlog::error("keeping the old deny list: {}", std::string(s.message()));
    }
  }
  spdlog::info("stopping");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
