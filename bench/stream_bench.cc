// `strait bench stream --wan PROFILE`: how long one frame takes from its producer's push to its
// consumer's pull through a real gateway when each site reaches the gateway over its own emulated
// link (issue 9: chunks streamed through the gateway, not store-and-forward). Each frame is sent
// whole (one chunk: the gateway can forward nothing before all of it has arrived, as a
// store-and-forward gateway would) and in pieces of --chunk-size (the gateway forwards each piece
// as it arrives), one frame at a time, beside what the link model predicts for both, with d the
// one-way delay, r the rate, x the frame's bytes and c the largest piece:
//   - whole, 2d + 2x/r: serialized on the producer's link, stored, serialized on the consumer's;
//   - in pieces, 2d + x/r + c/r: the consumer's link one piece behind the producer's.
// Both sites reach the gateway over mutual TLS, the only transport it serves. Until issue 45 this
// benchmark used the gateway's plaintext --insecure mode, now gone (no test switches in production
// binaries); docs/benchmarks.md says which of its figures were taken that way.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "bench/relay_job.h"
#include "core/frame_header.h"
#include "core/status.h"
#include "harness/subprocess.h"
#include "harness/test_certificates.h"
#include "harness/wan/link_emulator.h"
#include "harness/wan/link_profile.h"
#include "site/rpc/gateway_client.h"
#include "site/rpc/tls_credentials.h"

namespace strait::bench {
namespace {

using harness::Describe;
using harness::FindStraitExecutable;
using harness::LinkEmulator;
using harness::LinkProfile;
using harness::NamedProfile;
using harness::Process;
using harness::TempDir;

constexpr int kWarmUpFrames = 4;  // Let gRPC's flow-control windows grow to the link's BDP first.

struct Row {
  uint64_t frame_bytes = 0;
  uint64_t piece_bytes = 0;  // Largest piece; = frame_bytes when sent whole.
  double measured_ms = 0;    // Median over the runs.
  double model_ms = 0;
};

// Site `id` joined to the gateway at `address` over mutual TLS with its certificate.
absl::StatusOr<std::unique_ptr<site::GatewayClient>> Connect(const harness::TestCertificates& certs,
                                                             const std::string& address,
                                                             const std::string& id,
                                                             size_t chunk_bytes) {
  site::GatewayClient::Options options;
  options.address = address;
  STRAIT_ASSIGN_OR_RETURN(const crypto::TlsMaterial material, certs.Site(id));
  STRAIT_ASSIGN_OR_RETURN(options.credentials, site::MakeSiteChannelCredentials(material));
  options.chunk_bytes = chunk_bytes;
  return site::GatewayClient::Connect(options, RelayJoin(id));
}

// Milliseconds from the push of frame `index` (`bytes` long) to the end of its pull, which was
// placed at the gateway beforehand.
absl::StatusOr<double> TimeOneFrame(site::GatewayClient& producer, site::GatewayClient& consumer,
                                    const harness::LinkProfile& profile, uint64_t index,
                                    uint64_t bytes) {
  const v1::TensorKey key = RelayFrameKey(index);
  auto pulled = consumer.Pull(key, std::chrono::seconds(120));
  // The pull crosses the consumer's link first.
  std::this_thread::sleep_for(2 * profile.one_way_delay + std::chrono::milliseconds(50));
  v1::FrameHeader header;
  *header.mutable_key() = key;
  header.set_dtype(v1::FLOAT32);
  header.add_shape(static_cast<int64_t>(bytes / 4));
  header.set_raw_bytes(bytes / 4 * 4);
  const auto start = std::chrono::steady_clock::now();
  auto pushed = producer.Push(header, std::string(bytes, '\x5a'));
  absl::StatusOr<site::ReceivedFrame> frame = pulled.get();
  const auto end = std::chrono::steady_clock::now();
  if (!frame.ok()) return frame.status();
  consumer.Ack(key);
  if (absl::Status s = pushed.get(); !s.ok()) return s;
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// One gateway, two emulated links, a producer pushing in pieces of `chunk_bytes` (whole frames when
// it is at least the frame size); the median latency per frame size.
absl::Status MeasurePieces(const harness::TempDir& dir, const harness::TestCertificates& certs,
                           const harness::LinkProfile& profile,
                           const std::vector<uint64_t>& frame_sizes, uint64_t chunk_bytes, int runs,
                           int tag, std::vector<Row>& rows) {
  const std::string ready_file = dir.File("gateway" + std::to_string(tag) + ".ready");
  harness::Process gateway({harness::FindStraitExecutable("strait-gateway"), "--config",
                            dir.File("fed.yaml"), "--listen", "127.0.0.1:0", "--ready-file",
                            ready_file, "--log-level", "warn", "--no-dashboard"},
                           dir.File("gateway" + std::to_string(tag) + ".log"));
  auto ready = gateway.WaitForReadyFile(ready_file, {"grpc"}, std::chrono::seconds(30));
  if (ready.empty())
    return absl::UnavailableError("the gateway did not start:\n" + gateway.LogTail());
  const std::string address = "127.0.0.1:" + ready["grpc"];
  auto producer_link = harness::LinkEmulator::Start("127.0.0.1:0", address, profile);
  auto consumer_link = harness::LinkEmulator::Start("127.0.0.1:0", address, profile);
  if (!producer_link.ok()) return producer_link.status();
  if (!consumer_link.ok()) return consumer_link.status();
  auto consumer = Connect(certs, (*consumer_link)->address(), "b", kMaxChunkBytes);
  if (!consumer.ok()) return consumer.status();
  auto producer = Connect(certs, (*producer_link)->address(), "a", chunk_bytes);
  if (!producer.ok()) return producer.status();

  uint64_t index = 0;
  for (int i = 0; i < kWarmUpFrames; ++i) {
    if (auto ms = TimeOneFrame(**producer, **consumer, profile, index++, kMaxChunkBytes);
        !ms.ok()) {
      return ms.status();
    }
  }
  const double rate = profile.rate_bits_per_second / 8;  // bytes per second
  const double delay_ms = std::chrono::duration<double, std::milli>(profile.one_way_delay).count();
  for (uint64_t bytes : frame_sizes) {
    std::vector<double> samples;
    for (int r = 0; r < runs; ++r) {
      absl::StatusOr<double> ms = TimeOneFrame(**producer, **consumer, profile, index++, bytes);
      if (!ms.ok()) return ms.status();
      samples.push_back(*ms);
    }
    std::sort(samples.begin(), samples.end());
    Row row{.frame_bytes = bytes, .piece_bytes = CutIntoPieces(bytes, chunk_bytes).bytes};
    row.measured_ms = samples[samples.size() / 2];
    row.model_ms = 2 * delay_ms + 1e3 * static_cast<double>(bytes + row.piece_bytes) / rate;
    rows.push_back(row);
  }
  (void)(*producer)->Close();
  (void)(*consumer)->Close();
  return absl::OkStatus();
}

int RunStream(const std::string& profile_name, const std::vector<uint64_t>& frame_kib,
              uint64_t chunk_bytes, int runs, bool json) {
  absl::StatusOr<harness::LinkProfile> profile = harness::NamedProfile(profile_name);
  if (!profile.ok()) {
    std::fprintf(stderr, "strait bench stream: %s\n",
                 std::string(profile.status().message()).c_str());
    return 2;
  }
  harness::TempDir dir;
  std::ofstream(dir.File("fed.yaml")) << kRelayJobSpec;
  // certs/ beside fed.yaml: the job spec's default paths, so it needs no tls: block.
  absl::StatusOr<harness::TestCertificates> certs =
      harness::MakeCertificates(dir.File("certs"), {"a", "b"}, kRelayFederation);
  if (!certs.ok()) {
    std::fprintf(stderr, "strait bench stream: %s\n",
                 std::string(certs.status().message()).c_str());
    return 1;
  }
  // Frames over kMaxChunkBytes cannot be pushed whole (in one piece): timed in pieces only.
  std::vector<uint64_t> sizes, whole_sizes;
  for (uint64_t kib : frame_kib) {
    sizes.push_back(kib << 10);
    if (sizes.back() <= kMaxChunkBytes) whole_sizes.push_back(sizes.back());
  }
  std::vector<Row> rows;
  int tag = 0;
  for (uint64_t pieces : {uint64_t{kMaxChunkBytes}, chunk_bytes}) {
    const std::vector<uint64_t>& measured = pieces == kMaxChunkBytes ? whole_sizes : sizes;
    if (measured.empty()) continue;
    if (!json) {
      std::fprintf(stderr, "stream: %s, frames %s...\n", Describe(*profile).c_str(),
                   pieces == kMaxChunkBytes
                       ? "whole"
                       : absl::StrFormat("in pieces of %d KiB", pieces >> 10).c_str());
    }
    if (absl::Status s = MeasurePieces(dir, *certs, *profile, measured, pieces, runs, tag++, rows);
        !s.ok()) {
      std::fprintf(stderr, "stream bench failed: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& row : rows) {
      out.push_back({{"profile", profile->name},
                     {"frame_bytes", row.frame_bytes},
                     {"piece_bytes", row.piece_bytes},
                     {"measured_ms", row.measured_ms},
                     {"model_ms", row.model_ms}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("strait bench stream --wan %s: %s; one frame at a time, push to pull, median of %d\n",
              profile->name.c_str(), Describe(*profile).c_str(), runs);
  std::printf("%-9s %-14s %12s %10s\n", "frame", "sent as", "measured ms", "model ms");
  for (const Row& row : rows) {
    const std::string sent = row.piece_bytes == row.frame_bytes
                                 ? std::string("whole")
                                 : absl::StrFormat("%.0f KiB pieces", row.piece_bytes / 1024.0);
    std::printf("%-9s %-14s %12.1f %10.1f\n",
                absl::StrFormat("%d KiB", row.frame_bytes >> 10).c_str(), sent.c_str(),
                row.measured_ms, row.model_ms);
  }
  std::printf(
      "\nmodel: whole 2d + 2x/r (stored, then forwarded); in pieces 2d + x/r + c/r (each piece "
      "forwarded as it arrives); d one-way delay, r rate, x frame bytes, c piece bytes.\n");
  return 0;
}

}  // namespace

void AddBenchStreamCommand(CLI::App& bench, int* exit_code) {
  CLI::App* stream = bench.add_subcommand(
      "stream",
      "One frame's push-to-pull time through a real gateway over two emulated links: "
      "sent whole (store-and-forward) beside sent in pieces the gateway streams on");
  auto profile = std::make_shared<std::string>("continent");
  auto chunk = std::make_shared<uint64_t>(site::GatewayClient::Options{}.chunk_bytes);
  auto runs = std::make_shared<int>(5);
  auto frame_kib = std::make_shared<std::vector<uint64_t>>(std::vector<uint64_t>{128, 512, 1024});
  auto json = std::make_shared<bool>(false);
  stream
      ->add_option("--wan", *profile,
                   "Link profile of both sites: metro, region, continent, satellite")
      ->capture_default_str();
  stream->add_option("--chunk-size", *chunk, "Bytes per piece (gateway.chunk_size)")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{kMaxChunkBytes}))
      ->capture_default_str();
  stream->add_option("--runs", *runs, "Frames timed per size (the median is printed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  stream
      ->add_option(
          "--frame-kib", *frame_kib,
          "Frame sizes in KiB, comma-separated, at most 16384 (the benchmark job's largest "
          "tensor); those over 1024 are sent in pieces only (a large frame shows whether "
          "gRPC's flow-control windows fill the link)")
      ->delimiter(',')
      ->check(CLI::Range(uint64_t{1}, uint64_t{16} << 10))
      ->capture_default_str();
  stream->add_flag("--json", *json, "Print JSON instead of a table");
  stream->callback([=] { *exit_code = RunStream(*profile, *frame_kib, *chunk, *runs, *json); });
}

}  // namespace strait::bench
