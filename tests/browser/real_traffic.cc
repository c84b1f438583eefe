#include "real_traffic.h"

#include <cmath>
#include <fstream>

#include "core/join_request.h"
#include "core/status.h"
#include "harness/test_certificates.h"
#include "site/rpc/tls_credentials.h"

namespace strait::testing {
namespace {

// Eight layers split [0, 2) [2, 5) [5, 8), as the fake federation has them.
constexpr char kSpec[] = R"(name: fashion-demo
gateway: {memory_budget: 64MiB}
dashboard: {token_file: token}
model: {family: mlp, input: 784, hidden: [256, 256, 256, 256, 256, 256, 256], classes: 10}
data: {dataset: fashion-mnist}
training: {steps: 100000, global_batch: 64, microbatches: 4}
sites:
  - {id: dc-a, layers: [0, 2], device: cuda, workers: 4}
  - {id: dc-b, layers: [2, 5], device: cpu, workers: 8}
  - {id: dc-c, layers: [5, 8], device: cuda, workers: 2}
)";

v1::FrameHeader Header(uint64_t step, uint32_t microbatch, uint32_t boundary,
                       v1::Direction direction) {
  v1::FrameHeader header;
  v1::TensorKey& key = *header.mutable_key();
  key.set_job("fashion-demo");
  key.set_step(step);
  key.set_microbatch(microbatch);
  key.set_boundary(boundary);
  key.set_direction(direction);
  header.set_codec_chain("int8+zstd");
  header.set_dtype(v1::FLOAT32);
  header.add_shape(16);
  header.add_shape(256);
  header.set_raw_bytes(16 * 256 * 4);
  return header;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RealTraffic>> RealTraffic::Start(const std::string& gateway_binary,
                                                                const std::string& token) {
  std::unique_ptr<RealTraffic> traffic(new RealTraffic);
  RealTraffic& t = *traffic;
  std::ofstream(t.dir_.File("fed.yaml")) << kSpec;
  std::ofstream(t.dir_.File("token")) << token << "\n";
  // Mutual TLS, as every gateway serves: certs/ beside fed.yaml, the job spec's default paths.
  absl::StatusOr<harness::TestCertificates> certs =
      harness::MakeCertificates(t.dir_.File("certs"), {"dc-a", "dc-b", "dc-c"}, "fashion-demo");
  if (!certs.ok()) return certs.status();
  t.gateway_ = std::make_unique<harness::Process>(
      std::vector<std::string>{gateway_binary, "--config", t.dir_.File("fed.yaml"), "--listen",
                               "127.0.0.1:0", "--dashboard", "127.0.0.1:0", "--ready-file",
                               t.dir_.File("ready"), "--log-level", "warn"},
      t.dir_.File("gateway.log"));
  auto ready = t.gateway_->WaitForReadyFile(t.dir_.File("ready"), {"grpc", "http"},
                                            std::chrono::seconds(30));
  if (ready.empty())
    return absl::UnavailableError("the gateway did not start:\n" + t.gateway_->LogTail());
  t.http_port_ = std::stoi(ready["http"]);
  absl::StatusOr<JobSpec> spec = LoadJobSpec(t.dir_.File("fed.yaml"));
  if (!spec.ok()) return spec.status();
  // Site `stage` joined with `epoch`, over mutual TLS with its certificate.
  auto join = [&](int stage,
                  uint32_t epoch) -> absl::StatusOr<std::unique_ptr<site::GatewayClient>> {
    const std::string& id = spec->sites[stage].id;
    site::GatewayClient::Options options;
    options.address = "127.0.0.1:" + ready["grpc"];
    STRAIT_ASSIGN_OR_RETURN(const crypto::TlsMaterial material, certs->Site(id));
    STRAIT_ASSIGN_OR_RETURN(options.credentials, site::MakeSiteChannelCredentials(material));
    return site::GatewayClient::Connect(options,
                                        JoinRequestFor(*spec, stage, UnsignedKey(id, epoch)));
  };
  // dc-a restarts once before the others join, as a site may: the gateway's alerts (its stream
  // ended, it rejoined) give the dashboard something to list.
  {
    absl::StatusOr<std::unique_ptr<site::GatewayClient>> first = join(0, 1);
    if (!first.ok()) return first.status();
    (void)(*first)->Close();
  }
  for (int stage = 0; stage < static_cast<int>(spec->sites.size()); ++stage) {
    absl::StatusOr<std::unique_ptr<site::GatewayClient>> client = join(stage, stage == 0 ? 2 : 1);
    if (!client.ok()) return client.status();
    t.sites_.push_back(*std::move(client));
  }
  t.traffic_ = std::thread([&t] { t.Run(); });
  return traffic;
}

RealTraffic::~RealTraffic() {
  stop_ = true;
  if (traffic_.joinable()) traffic_.join();
  for (auto& site : sites_) (void)site->Close();
}

// One pipeline step after another: activations forward through both boundaries, gradients back,
// every frame pushed, pulled and acknowledged through the gateway; reports after each step.
void RealTraffic::Run() {
  const std::string activation(16 * 256 * 4 / 3, '\x17');  // "compressed" bodies
  const std::string gradient(16 * 256 * 2, '\x2c');
  // One push the gateway must refuse, so the dashboard lists a rejection.
  (void)sites_[2]->Push(Header(0, 0, 0, v1::FORWARD), activation).get();
  for (uint64_t step = 0; !stop_; ++step) {
    const auto started = std::chrono::steady_clock::now();
    for (uint32_t m = 0; m < 4; ++m) {
      for (uint32_t b = 0; b < 2; ++b) {
        (void)sites_[b]->Push(Header(step, m, b, v1::FORWARD), activation).get();
        auto frame = sites_[b + 1]
                         ->Pull(Header(step, m, b, v1::FORWARD).key(), std::chrono::seconds(5))
                         .get();
        if (frame.ok()) sites_[b + 1]->Ack(frame->header.key());
      }
      for (int b = 1; b >= 0; --b) {
        (void)sites_[b + 1]->Push(Header(step, m, b, v1::BACKWARD), gradient).get();
        auto frame =
            sites_[b]->Pull(Header(step, m, b, v1::BACKWARD).key(), std::chrono::seconds(5)).get();
        if (frame.ok()) sites_[b]->Ack(frame->header.key());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // "compute"
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    for (size_t i = 0; i < sites_.size(); ++i) {
      v1::SiteReport report;
      report.set_step(step);
      report.set_samples_per_second(64 / seconds);
      report.set_compute_s(0.1 * seconds / (seconds + 0.02));
      report.set_wait_s(seconds - report.compute_s());
      if (i + 1 == sites_.size()) {
        report.set_has_loss(true);
        report.set_loss(2.3 * std::exp(-0.02 * static_cast<double>(step)) + 0.3);
      }
      sites_[i]->Report(report);
    }
  }
}

}  // namespace strait::testing
