// Everything the gateway's streams share: the job, the mailbox, the federation, and a housekeeping
// thread that expires pulls and detects silent sites. Independent of gRPC (DESIGN.md §9: handler
// logic separate from the wiring), so tests and fuzzers drive it in-process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "core/job_spec.h"
#include "gateway/aggregate/replica_sums.h"
#include "gateway/exchange/serving_gate.h"
#include "gateway/mailbox/mailbox.h"
#include "gateway/membership/federation.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

struct GatewayOptions {
  uint64_t max_frame_bytes = 256ull << 20;  // Largest frame accepted on a push.
  std::chrono::milliseconds default_pull_timeout{30000};
  std::chrono::milliseconds housekeeping_interval{100};
  size_t max_open_transfers_per_stream = 16;
  size_t max_pulls_per_stream = 1024;
  // Standing credit a push stream that asks for it may hold (gateway.proto, Hello); 0 = one largest
  // frame plus 16 MiB, so that a producer keeps a link of up to ~850 Mbit/s at 150 ms round trip
  // busy without waiting for grants. All streams' credit together never exceeds the memory budget
  // minus one largest frame (see Mailbox).
  uint64_t push_credit_bytes = 0;
};

class GatewayCore {
 public:
  // `spec` must outlive the core; `view`: the split it serves (the plan's, with `layers: auto`).
  // Starts the housekeeping thread.
  GatewayCore(const JobSpec& spec, const JobView& view, GatewayOptions options);
  // With the split as the file writes it (JobView::Initial).
  GatewayCore(const JobSpec& spec, GatewayOptions options);
  // Stops the housekeeping thread.
  ~GatewayCore();

  const JobSpec& spec() const { return spec_; }
  const GatewayOptions& options() const { return options_; }
  // Standing credit per push stream: options().push_credit_bytes or its default.
  uint64_t push_credit_bytes() const;
  Mailbox& mailbox() { return mailbox_; }
  Federation& federation() { return federation_; }
  ReplicaSums& sums() { return sums_; }
  ServingGate& serving() { return serving_; }
  v1::FederationState Snapshot() const;

 private:
  void Housekeeping();

  const JobSpec& spec_;
  const GatewayOptions options_;
  Mailbox mailbox_;
  Federation federation_;
  ReplicaSums sums_;
  ServingGate serving_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread housekeeper_;
};

}  // namespace strait::gateway
