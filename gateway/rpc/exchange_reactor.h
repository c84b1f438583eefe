// gRPC wiring of one site's Exchange stream: a callback-API reactor (no thread per stream) that
// feeds each message to an ExchangeSession and writes the session's replies in order.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "gateway/exchange/exchange_session.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::gateway {

// Deletes itself when gRPC is done with the stream.
class ExchangeReactor : public grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage> {
 public:
  // `site_id`: the verified identity of the peer. `core` must outlive the reactor.
  ExchangeReactor(GatewayCore& core, std::string site_id);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  class Outbox;
  ~ExchangeReactor() override;
  void ReadNext();

  std::shared_ptr<Outbox> outbox_;
  std::unique_ptr<ExchangeSession> session_;
  v1::SiteMessage incoming_;
};

}  // namespace strait::gateway
