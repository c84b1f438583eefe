// `layers: auto` from a site's side (DESIGN.md §4): probes of the path to the gateway, which give
// the link's round trip and rate, and the Plan call that hands over the site's profile and waits
// for the split. Keeps grpcpp out of its callers, like gateway_connection.h.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "plan/site_profile.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

struct PlanDial {
  std::string address;  // host:port of the gateway.
  std::string site_id;
  crypto::TlsMaterial tls;  // Mutual TLS with the site's certificate.
};

// The link through the real path (TLS, gRPC, the gateway): the round trip is the median of small
// Probe calls, the rate a 1 MiB payload's bytes over the extra time its calls take. Waits for the
// gateway up to `timeout`.
absl::StatusOr<plan::MeasuredLink> ProbeLink(const PlanDial& dial, std::chrono::seconds timeout);

// Sends `request` and waits for the split, calling again while the gateway waits for the other
// sites' profiles (logged every call; the dashboard names the sites it waits for) until `timeout`
// has passed: then the last call's error. The gateway's refusal (FAILED_PRECONDITION,
// PERMISSION_DENIED) at once.
absl::StatusOr<v1::PlanReply> RequestPlan(const PlanDial& dial, const v1::PlanRequest& request,
                                          std::chrono::seconds timeout);

}  // namespace strait::site
