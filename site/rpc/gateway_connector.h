// What a site's session needs of its connection to the gateway (DESIGN.md §7, §9): join, join again
// after the connection was lost, the GatewayLink its pipeline uses, and the link keys of the
// current join. GatewayConnection (site/rpc/gateway_connection.h) is the gRPC one; tests use an
// in-process fake. This header does not include grpcpp: the session depends on it alone.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "site/exchange/gateway_link.h"
#include "site/exchange/link_security.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

// What a connection tells its owner, given to it at construction. Each may be called on the
// connection's own threads until the connection is closed; none may call back into the connection.
struct ConnectionEvents {
  // Right before each attempt to join (the owner forgets what the previous connection said).
  std::function<void()> joining;
  // A control message from the gateway (one at a time, from the moment of the join).
  std::function<void(const v1::Control&)> control;
  // The connection was lost (the gateway died or dropped this site, or the link broke); at most
  // once per join, not after Close.
  std::function<void(const absl::Status&)> lost;
};

class GatewayConnector {
 public:
  virtual ~GatewayConnector() = default;

  // Joins the gateway once, as a new epoch with a fresh link key, offering the checkpoint of step
  // `checkpoint` to resume from. Returns the gateway's reply (its neighbour keys); the gateway's
  // refusal (e.g. PERMISSION_DENIED) or UNAVAILABLE. Blocks up to the join timeout.
  virtual absl::StatusOr<v1::JoinReply> Join(std::optional<int64_t> checkpoint) = 0;

  // After a lost connection: drops it and joins again (as Join) with backoff and jitter until it
  // succeeds or the reconnect timeout passes; logs each failed attempt for the operator. After the
  // timeout: UNAVAILABLE whose message names the gateway, the timeout and the last error and ends
  // with a full stop (the caller may add what the operator should do). Blocks.
  virtual absl::StatusOr<v1::JoinReply> Rejoin(std::optional<int64_t> checkpoint) = 0;

  // The link to the gateway; valid as long as the connector. While no join holds (before the first,
  // after a loss), pushes and pulls fail with UNAVAILABLE and reports are dropped.
  virtual GatewayLink& link() = 0;

  // The link keys of the current join (this site's signed key went into it), or nullptr before the
  // first join. Valid until the next Join or Rejoin.
  virtual const LinkSecurity* security() const = 0;
};

}  // namespace strait::site
