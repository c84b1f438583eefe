// Real federations on loopback for the integration tests: harness::LocalFederation (certificates, a
// strait-gateway process and one strait-site process per site) running this build tree's binaries.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "crypto/certificates.h"
#include "harness/local_federation.h"
#include "site/nn/checkpoint.h"
#include "site/rpc/tls_credentials.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::testing {

using harness::MakeCertificates;
using harness::ReadFile;

// harness::LocalFederation running this build tree's binaries.
class BuildTreeFederation : public harness::LocalFederation {
 public:
  BuildTreeFederation(const std::string& yaml, const std::vector<std::string>& sites)
      : harness::LocalFederation(yaml, sites,
                                 harness::Executables::InBuildTree(STRAIT_BINARY_DIR)) {}
};

// The sites' final.ckpt files, in stage order, hold byte for byte the parameters and AdamW moments
// of the reference run's final.ckpt (`strait train` on the same job spec), after `steps` steps.
inline void ExpectSameStateAsReference(BuildTreeFederation& fed,
                                       const std::vector<std::string>& sites, int64_t steps) {
  absl::StatusOr<site::CheckpointState> reference =
      site::ReadCheckpoint(fed.ReferenceDir() + "/final.ckpt");
  ASSERT_TRUE(reference.ok()) << reference.status();
  const size_t n = reference->params.size();
  ASSERT_EQ(reference->optimizer_state.size(), 2 * n);  // AdamW: first and second moments.
  size_t offset = 0;
  for (const std::string& id : sites) {
    absl::StatusOr<site::CheckpointState> stage =
        site::ReadCheckpoint(fed.OutDir(id) + "/final.ckpt");
    ASSERT_TRUE(stage.ok()) << stage.status();
    EXPECT_EQ(stage->step, steps);
    const size_t k = stage->params.size();
    ASSERT_LE(offset + k, n);
    // Byte for byte: memcmp, not float ==, so that even -0.0 vs 0.0 or NaN bits count.
    EXPECT_EQ(0, std::memcmp(stage->params.data(), reference->params.data() + offset, 4 * k))
        << id << ": parameters differ from strait train";
    EXPECT_EQ(0, std::memcmp(stage->optimizer_state.data(),
                             reference->optimizer_state.data() + offset, 4 * k))
        << id << ": first moments differ";
    EXPECT_EQ(0, std::memcmp(stage->optimizer_state.data() + k,
                             reference->optimizer_state.data() + n + offset, 4 * k))
        << id << ": second moments differ";
    offset += k;
  }
  EXPECT_EQ(offset, n);
}

// Every site of `sites` ends with the same final.ckpt in `a` as in `b`: step, parameters and
// optimizer state byte for byte (two runs that must train the same bits).
inline void ExpectSameFinalState(BuildTreeFederation& a, BuildTreeFederation& b,
                                 const std::vector<std::string>& sites) {
  for (const std::string& id : sites) {
    absl::StatusOr<site::CheckpointState> x = site::ReadCheckpoint(a.OutDir(id) + "/final.ckpt");
    absl::StatusOr<site::CheckpointState> y = site::ReadCheckpoint(b.OutDir(id) + "/final.ckpt");
    ASSERT_TRUE(x.ok() && y.ok()) << id << ": " << x.status() << " / " << y.status();
    ASSERT_EQ(x->params.size(), y->params.size()) << id;
    EXPECT_EQ(x->step, y->step) << id;
    EXPECT_EQ(0, std::memcmp(x->params.data(), y->params.data(), 4 * x->params.size()))
        << id << ": parameters differ";
    ASSERT_EQ(x->optimizer_state.size(), y->optimizer_state.size()) << id;
    EXPECT_EQ(0, std::memcmp(x->optimizer_state.data(), y->optimizer_state.data(),
                             4 * x->optimizer_state.size()))
        << id << ": optimizer state differs";
  }
}

// The sites' final.ckpt files hold the reference run's parameters (`strait train`, RunReference)
// up to the order of float sums (a site that splits rows or features over several GEMMs and sums
// partial results): per stage ||site - reference|| / ||reference|| <= 1e-5, printed and returned.
inline std::vector<double> ExpectLikeReferenceUpToFloatOrder(
    BuildTreeFederation& fed, const std::vector<std::string>& sites) {
  std::vector<double> relative;
  absl::StatusOr<site::CheckpointState> reference =
      site::ReadCheckpoint(fed.ReferenceDir() + "/final.ckpt");
  EXPECT_TRUE(reference.ok()) << reference.status();
  if (!reference.ok()) return relative;
  size_t offset = 0;
  for (const std::string& id : sites) {
    absl::StatusOr<site::CheckpointState> stage =
        site::ReadCheckpoint(fed.OutDir(id) + "/final.ckpt");
    EXPECT_TRUE(stage.ok()) << stage.status();
    if (!stage.ok() || offset + stage->params.size() > reference->params.size()) break;
    // AdamW turns a last-bit difference in a near-zero gradient into a step of up to lr, so
    // single parameters can differ by more; the stage as a whole may not.
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < stage->params.size(); ++i) {
      const double want = reference->params[offset + i], d = stage->params[i] - want;
      diff += d * d;
      norm += want * want;
    }
    relative.push_back(std::sqrt(diff / norm));
    std::printf("%s: ||federation - strait train|| / ||strait train|| = %.3g\n", id.c_str(),
                relative.back());
    EXPECT_LE(relative.back(), 1e-5) << id;
    offset += stage->params.size();
  }
  EXPECT_EQ(offset, reference->params.size());
  return relative;
}

// The gateway's log and every site's, their last few KiB each: what a failed wait shows.
inline std::string FederationLogs(harness::LocalFederation& fed,
                                  const std::vector<std::string>& sites) {
  std::string logs = "gateway:\n" + fed.gateway().LogTail(8000);
  for (const std::string& site : sites) logs += "\n" + site + ":\n" + fed.SiteLog(site);
  return logs;
}

// GetState over mutual TLS with site dc-a's certificate.
inline v1::FederationState GatewayState(harness::LocalFederation& fed) {
  const std::string certs = fed.dir().File("certs") + "/";
  auto material = crypto::LoadTlsMaterial(certs + "ca.pem", certs + "dc-a.pem", certs + "dc-a.key");
  EXPECT_TRUE(material.ok()) << material.status();
  auto stub = v1::Gateway::NewStub(
      grpc::CreateChannel(fed.gateway_address(), *site::MakeSiteChannelCredentials(*material)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::FederationState state;
  grpc::Status status = stub->GetState(&context, v1::GetStateRequest(), &state);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return state;
}

}  // namespace strait::testing
