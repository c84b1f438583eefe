#include "site/rpc/plan_client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/rpc/tls_credentials.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::site {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kProbeBytes = 1 << 20;
constexpr int kProbes = 5;

absl::StatusOr<std::unique_ptr<v1::Gateway::Stub>> Connect(const PlanDial& dial) {
  STRAIT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                          MakeSiteChannelCredentials(dial.tls));
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(2 * kProbeBytes);
  return v1::Gateway::NewStub(grpc::CreateCustomChannel(dial.address, credentials, args));
}

void Prepare(grpc::ClientContext& context, std::chrono::system_clock::time_point deadline) {
  context.set_deadline(deadline);
  context.set_wait_for_ready(true);  // The gateway may still be starting.
}

absl::Status Failed(const PlanDial& dial, const char* what, const grpc::Status& status) {
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrCat(what, " the gateway at ", dial.address, ": ", status.error_message()));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

absl::StatusOr<plan::MeasuredLink> ProbeLink(const PlanDial& dial, std::chrono::seconds timeout) {
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<v1::Gateway::Stub> stub, Connect(dial));
  const auto deadline = std::chrono::system_clock::now() + timeout;
  // Times one Probe of `bytes`; the first call also waits for the gateway and sets up the channel.
  auto time_probe = [&](int bytes) -> absl::StatusOr<double> {
    v1::ProbeRequest request;
    request.set_payload(std::string(bytes, '\0'));
    v1::ProbeReply reply;
    grpc::ClientContext context;
    Prepare(context, deadline);
    const auto start = Clock::now();
    const grpc::Status status = stub->Probe(&context, request, &reply);
    if (!status.ok()) return Failed(dial, "probing", status);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  STRAIT_RETURN_IF_ERROR(time_probe(0).status());  // Connects.
  std::vector<double> small, large;
  for (int i = 0; i < kProbes; ++i) {
    STRAIT_ASSIGN_OR_RETURN(double s, time_probe(64));
    STRAIT_ASSIGN_OR_RETURN(double l, time_probe(kProbeBytes));
    small.push_back(s);
    large.push_back(l);
  }
  const double round_trip = Median(small);
  const double transfer = Median(large) - round_trip;
  return plan::MeasuredLink{.site = dial.site_id,
                            .round_trip_s = round_trip,
                            .bytes_per_second = transfer > 0 ? kProbeBytes / transfer : 0};
}

absl::StatusOr<v1::PlanReply> RequestPlan(const PlanDial& dial, const v1::PlanRequest& request,
                                          std::chrono::seconds timeout) {
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<v1::Gateway::Stub> stub, Connect(dial));
  const auto give_up = Clock::now() + timeout;
  constexpr auto kCall = std::chrono::seconds(10);
  while (true) {
    v1::PlanReply reply;
    grpc::ClientContext context;
    Prepare(context, std::chrono::system_clock::now() + kCall);
    const grpc::Status status = stub->Plan(&context, request, &reply);
    if (status.ok()) return reply;
    const bool waiting = status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                         status.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (!waiting || Clock::now() >= give_up) return Failed(dial, "planning the split with", status);
    spdlog::info("waiting for the gateway to plan the split ({})", status.error_message());
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

}  // namespace strait::site
