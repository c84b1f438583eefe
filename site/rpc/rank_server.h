// The leader's gRPC server for its follower ranks (DESIGN.md §4, §5;
// proto/strait/v1/site_ranks.proto): mutual TLS where the leader presents its site's certificate
// and admits only callers whose certificate the federation CA issued to the same site; the order
// stream of each attached follower, and the rendezvous store. What to admit and what to send is
// RankAdmission's (site/daemon/rank_leader.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "site/rpc/rank_link.h"

namespace grpc {
class Server;
}

namespace strait::site {

class RankServer {
 public:
  struct Options {
    std::string listen;  // host:port; port 0 picks a free one.
    std::string site_id;
    crypto::TlsMaterial tls;  // The site's certificate and key, and the federation CA.
    crypto::DenyList deny_list;
  };
  // Starts serving; `admission` must outlive the server.
  static absl::StatusOr<std::unique_ptr<RankServer>> Start(Options options,
                                                           RankAdmission& admission);
  ~RankServer();  // Ends every stream and stops.

  int port() const { return port_; }

 private:
  class Service;
  RankServer() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace strait::site
