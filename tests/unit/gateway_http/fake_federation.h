// A fake snapshot source for the dashboard's tests: three sites training, step rising and loss
// falling as time goes on. Used by the unit tests and by the browser test's server.
#pragma once

#include <functional>

#include "strait/v1/gateway.pb.h"

namespace strait::gateway::testing {

// The federation "fashion-demo" `t_s` seconds into training: sites dc-a (layers [0, 2), cuda x 4),
// dc-b ([2, 5), cpu x 8) and dc-c ([5, 8), cuda x 2, computes the loss); links forward and backward
// across boundaries 0 and 1 with growing byte counters; some rejections and alerts. The step is
// floor(4 * t_s); the loss falls with the step. Pure function of its arguments.
v1::FederationState FakeFederationState(double t_s);

// A snapshot callback for DashboardServer: FakeFederationState at the seconds since this call,
// times `speed`. Thread-safe.
std::function<v1::FederationState()> FakeSnapshotSource(double speed = 1.0);

}  // namespace strait::gateway::testing
