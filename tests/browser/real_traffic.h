// A real strait-gateway process with three test sites pushing, pulling and reporting through it,
// for the browser test's "real" mode: the dashboard then shows live traffic, not fake snapshots.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "harness/subprocess.h"
#include "site/rpc/gateway_client.h"

namespace strait::testing {

class RealTraffic {
 public:
  // Starts the gateway (mutual TLS with certificates made here, dashboard on a free port, `token`
  // required) and the sites' traffic.
  static absl::StatusOr<std::unique_ptr<RealTraffic>> Start(const std::string& gateway_binary,
                                                            const std::string& token);
  // Stops the traffic, then the gateway.
  ~RealTraffic();
  int http_port() const { return http_port_; }

 private:
  RealTraffic() = default;
  void Run();

  harness::TempDir dir_;
  std::unique_ptr<harness::Process> gateway_;
  std::vector<std::unique_ptr<site::GatewayClient>> sites_;
  int http_port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread traffic_;
};

}  // namespace strait::testing
