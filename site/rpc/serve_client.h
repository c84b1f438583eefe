// A serving federation's client over mutual TLS (docs/distillation.md): the gateway's ServeKeys and
// Generate calls, their gRPC errors as statuses naming the call. What the frames hold is the
// caller's (tools/federation_sampling.h seals and opens them).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

class ServeClient {
 public:
  // A channel to `address` with the client's certificate and the federation's CA.
  static absl::StatusOr<std::unique_ptr<ServeClient>> Connect(const std::string& address,
                                                              const crypto::TlsMaterial& tls);
  ~ServeClient();

  absl::StatusOr<v1::ServeKeysReply> Keys();
  // Blocks until the last token is in (or `timeout_s` passes).
  absl::StatusOr<v1::GenerateReply> Generate(const v1::GenerateRequest& request,
                                             double timeout_s = 600);

 private:
  struct Channel;  // The gRPC channel's generated client (kept out of this header).
  explicit ServeClient(std::unique_ptr<Channel> channel);
  std::unique_ptr<Channel> channel_;
};

}  // namespace strait::site
