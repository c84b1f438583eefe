// The gateway's HTTP side (DESIGN.md §8): the live dashboard page, /api/state and /metrics, served
// with Boost.Beast from snapshots of the federation that the gateway hands over through a callback.
//
//   auto server = DashboardServer::Start({.address = "127.0.0.1:8080"}, [&] { return Snapshot();
//   }); if (!server.ok()) return server.status();
//   // ... (*server)->port() ...; destroying the server stops it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

struct DashboardOptions {
  // host:port to listen on; "[::1]:0" style for IPv6. Port 0 picks a free port (see port()).
  // Binds to localhost unless configured otherwise (DESIGN.md §5).
  std::string address = "127.0.0.1:0";
  // Bearer token every request must carry; empty: no authentication.
  std::string token;
  // How often the snapshot callback is called; each call adds one point to the history.
  std::chrono::milliseconds sample_interval{1000};
  // Points kept per time series (3600 at 1 s: the last hour).
  size_t history = 3600;
  // Connections served at once; further ones are closed as soon as they are accepted.
  size_t max_connections = 512;
};

// Serves on one network thread of its own and samples on another; never blocks its caller after
// Start. Read-only: GET and HEAD only. See http_router.h for the routes.
class DashboardServer {
 public:
  using SnapshotFn = std::function<v1::FederationState()>;

  // Binds `options.address`, calls `snapshot` once on the caller's thread (so the first page load
  // has data), then every `options.sample_interval` on the sampler thread. `snapshot` must be
  // thread-safe with respect to the caller's other threads, must not throw, and should be quick:
  // it runs while holding no lock of the server. Errors: INVALID_ARGUMENT for a malformed address
  // or options, UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(DashboardOptions options,
                                                                SnapshotFn snapshot);

  // Stops sampling and serving, closes every connection and joins both threads. Blocks until done
  // (at most one snapshot call in flight).
  ~DashboardServer();

  DashboardServer(const DashboardServer&) = delete;
  DashboardServer& operator=(const DashboardServer&) = delete;

  // The bound TCP port (the picked one when the address asked for port 0).
  int port() const;

 private:
  struct Impl;
  explicit DashboardServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::gateway
