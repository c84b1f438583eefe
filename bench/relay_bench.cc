// `strait bench relay`: how fast frames cross a real gateway, beside a direct gRPC stream between
// the same two processes, both over mutual TLS (issue: gateway relay >= 50% of direct).
//
// The bench process is the producer (site "a"). For each frame size it starts a real
// `strait-gateway` and a consumer process (`strait bench relay-sink`, site "b") that pulls every
// frame through the gateway and also serves a direct sink. The producer pushes the same frames (1)
// through the gateway and (2) straight to the sink; the consumer stamps the moment the last frame
// arrived (steady clock, shared by processes on one machine), so both figures are end to end.
//
// Until issue 45 it also measured plaintext gRPC, with the gateway's --insecure mode; that mode is
// gone (no test switches in production binaries), so both paths are measured with mutual TLS, the
// only transport a gateway serves. docs/benchmarks.md keeps the older plaintext rows, marked.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <deque>
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
#include "harness/test_certificates.h"
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

// Where the certificates are (harness::MakeCertificates wrote them into `tls_dir`).
harness::TestCertificates CertificatesIn(const std::string& tls_dir) { return {.dir = tls_dir}; }

// Client options of site `id`: mutual TLS with its certificate.
absl::StatusOr<site::GatewayClient::Options> ClientOptions(const std::string& address,
                                                           const std::string& tls_dir,
                                                           const std::string& id) {
  site::GatewayClient::Options options;
  options.address = address;
  STRAIT_ASSIGN_OR_RETURN(const crypto::TlsMaterial material, CertificatesIn(tls_dir).Site(id));
  STRAIT_ASSIGN_OR_RETURN(options.credentials, site::MakeSiteChannelCredentials(material));
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
  // The direct sink serves with the gateway's certificate, so that both paths are the same TLS.
  auto material = CertificatesIn(flags.tls_dir).Gateway();
  if (!material.ok())
    return std::fprintf(stderr, "%s\n", std::string(material.status().message()).c_str()), 1;
  auto credentials =
      gateway::MakeGatewayServerCredentials(*material, std::make_shared<gateway::RevocationList>());
  if (!credentials.ok()) return 1;
  auto sink = RelaySink::Start(*credentials, [&](uint64_t n) {
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
  m.frame_bytes = bytes;
  m.frames = std::max<uint64_t>(8, total_bytes / bytes);
  const std::string tag = absl::StrCat(dir, "/run", run);
  // fed.yaml has no tls: block: the gateway finds its certificate in certs/ beside it (tls_dir).
  harness::Process gateway(
      {harness::FindStraitExecutable("strait-gateway"), "--config", dir + "/fed.yaml", "--listen",
       "127.0.0.1:0", "--ready-file", tag + ".gateway", "--log-level", "warn", "--no-dashboard"},
      tag + ".gateway.log");
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
                                        tag + ".result",
                                        "--tls-dir",
                                        tls_dir};
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

int RunRelay(bool json, uint64_t total_mib) {
  harness::TempDir dir;
  std::ofstream(dir.File("fed.yaml")) << kRelayJobSpec;
  absl::StatusOr<harness::TestCertificates> certs =
      harness::MakeCertificates(dir.File("certs"), {"a", "b"}, kRelayFederation);
  if (!certs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(certs.status().message()).c_str());
    return 1;
  }
  std::vector<Measurement> results;
  int run = 0;
  for (uint64_t bytes : {uint64_t{1} << 20, uint64_t{16} << 20}) {
    if (!json) {
      std::fprintf(stderr, "relay: mutual TLS, %llu MiB frames...\n",
                   static_cast<unsigned long long>(bytes >> 20));
    }
    absl::StatusOr<Measurement> m = Measure(dir.path(), certs->dir, bytes, total_mib << 20, run++);
    if (!m.ok()) {
      std::fprintf(stderr, "relay bench failed: %s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    results.push_back(*m);
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Measurement& m : results) {
      out.push_back({{"transport", "mutual TLS"},
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
    std::printf("%-11s %4llu MiB %7llu %16.2f %15.2f %6.0f%%\n", "mutual TLS",
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
      "both over mutual TLS, 1 MiB and 16 MiB frames");
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
  sink->add_option("--tls-dir", flags->tls_dir)->required();
  sink->add_option("--frames", flags->frames)->required();
  sink->add_option("--ready-file", flags->ready_file)->required();
  sink->add_option("--result-file", flags->result_file)->required();
  sink->callback([=] { *exit_code = RunSink(*flags); });
}

}  // namespace strait::bench
