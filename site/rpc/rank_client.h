// A follower rank's gRPC link to its site's leader (DESIGN.md §4, §5): mutual TLS where the rank
// presents its site's certificate and accepts only a leader presenting a certificate that the
// federation CA issued to the same site (a site certificate names no host, so the check is the
// identity, not the address dialled).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "site/rpc/rank_link.h"

namespace strait::site {

struct LeaderAddress {
  std::string address;  // host:port of the leader's rank server.
  std::string site_id;
  crypto::TlsMaterial tls;  // This rank's certificate and key (its site's), and the federation CA.
  crypto::DenyList deny_list;
  std::chrono::milliseconds connect_timeout{5000};
};

// Dials the leader and attaches with `hello`. Unavailable when the leader cannot be reached (or
// the TLS handshake fails: a certificate of another CA is refused there) within the timeout; the
// leader's refusal comes with the first Next().
absl::StatusOr<std::unique_ptr<LeaderLink>> AttachToLeader(const LeaderAddress& leader,
                                                           const v1::RankHello& hello);

}  // namespace strait::site
