// `strait bench relay`: how fast frames cross a real gateway, beside a direct gRPC stream between
// the same two processes, plaintext and with mutual TLS (issue: gateway relay >= 50% of direct).
//
// The bench process is the producer (site "a"). For each transport and frame size it starts a real
// `strait-gateway` and a consumer process (`strait bench relay-sink`, site "b") that pulls every
// frame through the gateway and also serves a direct sink. The producer pushes the same frames (1)
// through the gateway and (2) straight to the sink; the consumer stamps the moment the last frame
// arrived (steady clock, shared by processes on one machine), so both figures are end to end.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "bench/relay_job.h"
#include "bench/rpc/relay_sink.h"
#include "core/status.h"
#include "crypto/certificates.h"
#include "gateway/rpc/tls_credentials.h"
#include "harness/subprocess.h"
#include "site/rpc/gateway_client.h"
#include "site/rpc/tls_credentials.h"

namespace strait::bench {
namespace {

using harness::FindStraitExecutable;
using harness::Process;
using harness::TempDir;

constexpr int kPullWindow = 8;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Client credentials of site `id`: insecure (a header names the site) or its certificate.
absl::StatusOr<site::GatewayClient::Options> ClientOptions(const std::string& address,
                                                           const std::string& tls_dir,
                                                           const std::string& id) {
  site::GatewayClient::Options options;
  options.address = address;
  if (tls_dir.empty()) {
    options.credentials = grpc::InsecureChannelCredentials();
    options.insecure_site_id = id;
    return options;
  }
  absl::StatusOr<crypto::TlsMaterial> material = crypto::LoadTlsMaterial(
      tls_dir + "/ca.pem", tls_dir + "/" + id + ".pem", tls_dir + "/" + id + ".key");
  if (!material.ok()) return material.status();
  STRAIT_ASSIGN_OR_RETURN(options.credentials, site::MakeSiteChannelCredentials(*material));
  return options;
}

void AppendResult(const std::string& file, const std::string& line) {
  std::ofstream(file, std::ios::app) << line << "\n";
}

// ---- consumer process ----

struct SinkFlags {
  std::string gateway, tls_dir, ready_file, result_file;
  uint64_t frames = 0;
};

int RunSink(const SinkFlags& flags) {
  std::shared_ptr<grpc::ServerCredentials> server_credentials = grpc::InsecureServerCredentials();
  if (!flags.tls_dir.empty()) {
    auto material = crypto::LoadTlsMaterial(
        flags.tls_dir + "/ca.pem", flags.tls_dir + "/gateway.pem", flags.tls_dir + "/gateway.key");
    if (!material.ok())
      return std::fprintf(stderr, "%s\n", std::string(material.status().message()).c_str()), 1;
    auto credentials = gateway::MakeGatewayServerCredentials(
        *material, std::make_shared<gateway::RevocationList>());
    if (!credentials.ok()) return 1;
    server_credentials = *credentials;
  }
  auto sink = RelaySink::Start(server_credentials, [&](uint64_t n) {
    if (n == flags.frames) AppendResult(flags.result_file, absl::StrCat("direct_done=", NowNs()));
  });
  if (!sink.ok())
    return std::fprintf(stderr, "%s\n", std::string(sink.status().message()).c_str()), 1;
  auto options = ClientOptions(flags.gateway, flags.tls_dir, "b");
  if (!options.ok()) return 1;
  auto client = site::GatewayClient::Connect(*options, RelayJoin("b"));
  if (!client.ok())
    return std::fprintf(stderr, "%s\n", std::string(client.status().message()).c_str()), 1;
  AppendResult(flags.ready_file, absl::StrCat("direct=", (*sink)->port()));

  // Pull every frame through the gateway, kPullWindow at a time, acknowledging each.
  std::deque<std::future<absl::StatusOr<site::ReceivedFrame>>> window;
  uint64_t next = 0;
  for (uint64_t done = 0; done < flags.frames; ++done) {
    while (next < flags.frames && window.size() < kPullWindow) {
      window.push_back((*client)->Pull(RelayFrameKey(next++), std::chrono::seconds(120)));
    }
    absl::StatusOr<site::ReceivedFrame> frame = window.front().get();
    window.pop_front();
    if (!frame.ok())
      return std::fprintf(stderr, "pull: %s\n", std::string(frame.status().message()).c_str()), 1;
    (*client)->Ack(frame->header.key());
  }
  AppendResult(flags.result_file, absl::StrCat("gateway_done=", NowNs()));
  // Serve the direct stream until the producer stops this process.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// ---- producer (the bench itself) ----

struct Measurement {
  std::string transport;
  uint64_t frame_bytes = 0, frames = 0;
  double gateway_gbps = 0, direct_gbps = 0;
};

// Pushes `frames` frames of `bytes` to whatever `client` is connected to; returns the start time.
absl::StatusOr<int64_t> PushAll(site::GatewayClient& client, uint64_t frames, uint64_t bytes) {
  const std::string body(bytes, '\x5a');
  std::vector<std::future<absl::Status>> acks;
  const int64_t start = NowNs();
  for (uint64_t i = 0; i < frames; ++i) {
    v1::FrameHeader header;
    *header.mutable_key() = RelayFrameKey(i);
    header.set_dtype(v1::FLOAT32);
    header.add_shape(static_cast<int64_t>(bytes / 4));
    header.set_raw_bytes(bytes / 4 * 4);
    acks.push_back(client.Push(header, body));
  }
  for (auto& ack : acks) {
    if (absl::Status s = ack.get(); !s.ok()) return s;
  }
  return start;
}

absl::StatusOr<int64_t> WaitForResult(harness::Process& sink, const std::string& file,
                                      const std::string& key) {
  auto values = sink.WaitForReadyFile(file, {key}, std::chrono::seconds(300));
  if (values.empty())
    return absl::DeadlineExceededError("the consumer did not finish:\n" + sink.LogTail());
  return std::stoll(values[key]);
}

absl::StatusOr<Measurement> Measure(const std::string& dir, const std::string& tls_dir,
                                    uint64_t bytes, uint64_t total_bytes, int run) {
  Measurement m;
  m.transport = tls_dir.empty() ? "plaintext" : "mutual TLS";
  m.frame_bytes = bytes;
  m.frames = std::max<uint64_t>(8, total_bytes / bytes);
  const std::string tag = absl::StrCat(dir, "/run", run);
  std::vector<std::string> gateway_args = {harness::FindStraitExecutable("strait-gateway"),
                                           "--config",
                                           dir + "/fed.yaml",
                                           "--listen",
                                           "127.0.0.1:0",
                                           "--ready-file",
                                           tag + ".gateway",
                                           "--log-level",
                                           "warn",
                                           "--no-dashboard"};
  if (tls_dir.empty()) gateway_args.push_back("--insecure");
  harness::Process gateway(gateway_args, tag + ".gateway.log");
  auto ready = gateway.WaitForReadyFile(tag + ".gateway", {"grpc"}, std::chrono::seconds(30));
  if (ready.empty())
    return absl::UnavailableError("the gateway did not start:\n" + gateway.LogTail());
  const std::string address = "127.0.0.1:" + ready["grpc"];

  std::vector<std::string> sink_args = {harness::FindStraitExecutable("strait"),
                                        "bench",
                                        "relay-sink",
                                        "--gateway",
                                        address,
                                        "--frames",
                                        std::to_string(m.frames),
                                        "--ready-file",
                                        tag + ".sink",
                                        "--result-file",
                                        tag + ".result"};
  if (!tls_dir.empty()) sink_args.insert(sink_args.end(), {"--tls-dir", tls_dir});
  harness::Process sink(sink_args, tag + ".sink.log");
  auto sink_ready = sink.WaitForReadyFile(tag + ".sink", {"direct"}, std::chrono::seconds(30));
  if (sink_ready.empty())
    return absl::UnavailableError("the consumer did not start:\n" + sink.LogTail());

  auto options = ClientOptions(address, tls_dir, "a");
  if (!options.ok()) return options.status();
  auto client = site::GatewayClient::Connect(*options, RelayJoin("a"));
  if (!client.ok()) return client.status();
  absl::StatusOr<int64_t> start = PushAll(**client, m.frames, bytes);
  if (!start.ok()) return start.status();
  absl::StatusOr<int64_t> end = WaitForResult(sink, tag + ".result", "gateway_done");
  if (!end.ok()) return end.status();
  m.gateway_gbps = static_cast<double>(m.frames * bytes) / static_cast<double>(*end - *start);
  (void)(*client)->Close();

  auto direct_options = ClientOptions("127.0.0.1:" + sink_ready["direct"], tls_dir, "a");
  auto direct = site::GatewayClient::Connect(*direct_options, RelayJoin("a"));
  if (!direct.ok()) return direct.status();
  start = PushAll(**direct, m.frames, bytes);
  if (!start.ok()) return start.status();
  end = WaitForResult(sink, tag + ".result", "direct_done");
  if (!end.ok()) return end.status();
  m.direct_gbps = static_cast<double>(m.frames * bytes) / static_cast<double>(*end - *start);
  (void)(*direct)->Close();
  return m;
}

absl::Status MakeCertificates(const std::string& dir) {
  const std::string strait = harness::FindStraitExecutable("strait");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{strait, "certs", "init", "--dir", dir, "--name", kRelayFederation},
        {strait, "certs", "issue", "--dir", dir, "--gateway", "127.0.0.1"},
        {strait, "certs", "issue", "--dir", dir, "--site", "a"},
        {strait, "certs", "issue", "--dir", dir, "--site", "b"}}) {
    harness::Process certs(args, dir + "/certs.log");
    if (certs.Wait(std::chrono::seconds(60)) != 0)
      return absl::InternalError("strait certs failed:\n" + certs.LogTail());
  }
  return absl::OkStatus();
}

int RunRelay(bool json, uint64_t total_mib) {
  harness::TempDir dir;
  std::ofstream(dir.File("fed.yaml")) << kRelayJobSpec;
  const std::string tls_dir = dir.File("certs");
  std::filesystem::create_directories(tls_dir);
  if (absl::Status s = MakeCertificates(tls_dir); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<Measurement> results;
  int run = 0;
  for (const std::string& transport : {std::string(), tls_dir}) {
    for (uint64_t bytes : {uint64_t{1} << 20, uint64_t{16} << 20}) {
      if (!json) {
        std::fprintf(stderr, "relay: %s, %llu MiB frames...\n",
                     transport.empty() ? "plaintext" : "mutual TLS",
                     static_cast<unsigned long long>(bytes >> 20));
      }
      absl::StatusOr<Measurement> m = Measure(dir.path(), transport, bytes, total_mib << 20, run++);
      if (!m.ok()) {
        std::fprintf(stderr, "relay bench failed: %s\n", std::string(m.status().message()).c_str());
        return 1;
      }
      results.push_back(*m);
    }
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Measurement& m : results) {
      out.push_back({{"transport", m.transport},
                     {"frame_bytes", m.frame_bytes},
                     {"frames", m.frames},
                     {"gateway_gb_per_s", m.gateway_gbps},
                     {"direct_gb_per_s", m.direct_gbps},
                     {"ratio", m.gateway_gbps / m.direct_gbps}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-11s %7s %7s %16s %15s %7s\n", "transport", "frame", "frames", "via gateway GB/s",
              "direct GB/s", "ratio");
  for (const Measurement& m : results) {
    std::printf("%-11s %4llu MiB %7llu %16.2f %15.2f %6.0f%%\n", m.transport.c_str(),
                static_cast<unsigned long long>(m.frame_bytes >> 20),
                static_cast<unsigned long long>(m.frames), m.gateway_gbps, m.direct_gbps,
                100 * m.gateway_gbps / m.direct_gbps);
  }
  return 0;
}

}  // namespace

void AddBenchRelayCommand(CLI::App& bench, int* exit_code) {
  CLI::App* relay = bench.add_subcommand(
      "relay",
      "Frames through a real gateway vs a direct gRPC stream between the same two processes, "
      "plaintext and mutual TLS, 1 MiB and 16 MiB frames");
  auto json = std::make_shared<bool>(false);
  auto mib = std::make_shared<uint64_t>(256);
  relay->add_flag("--json", *json, "Print JSON instead of a table");
  relay->add_option("--mib", *mib, "MiB sent per measurement")->capture_default_str();
  relay->callback([=] { *exit_code = RunRelay(*json, *mib); });

  // The consumer side, started by `relay` itself; hidden from --help.
  CLI::App* sink = bench.add_subcommand("relay-sink", "Consumer process of `strait bench relay`");
  sink->group("");
  auto flags = std::make_shared<SinkFlags>();
  sink->add_option("--gateway", flags->gateway)->required();
  sink->add_option("--tls-dir", flags->tls_dir);
  sink->add_option("--frames", flags->frames)->required();
  sink->add_option("--ready-file", flags->ready_file)->required();
  sink->add_option("--result-file", flags->result_file)->required();
  sink->callback([=] { *exit_code = RunSink(*flags); });
}

}  // namespace strait::bench
