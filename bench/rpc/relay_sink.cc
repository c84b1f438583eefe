#include "bench/rpc/relay_sink.h"

#include "strait/v1/gateway.grpc.pb.h"

namespace strait::bench {

class RelaySink::Service final : public v1::Gateway::Service {
 public:
  explicit Service(std::function<void(uint64_t)> on_frames) : on_frames_(std::move(on_frames)) {}

  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest* request,
                    v1::JoinReply* reply) override {
    reply->set_epoch(request->key().epoch());
    return grpc::Status::OK;
  }

  grpc::Status Exchange(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::GatewayMessage, v1::SiteMessage>* stream) override {
    v1::SiteMessage message;
    uint32_t chunks_left = 0;
    while (stream->Read(&message)) {
      // Credit protocol (gateway.proto, Hello): the sink stores nothing, so it has room for any
      // frame at once: unlimited standing credit, and every offer granted.
      if (message.has_hello() && message.hello().credit()) {
        v1::GatewayMessage credit;
        credit.mutable_push_credit()->set_bytes(uint64_t{1} << 62);
        stream->Write(credit);
        continue;
      }
      if (message.has_offer()) {
        v1::GatewayMessage grant;
        grant.mutable_push_grant()->set_transfer_id(message.offer().transfer_id());
        stream->Write(grant);
        continue;
      }
      if (!message.has_push()) continue;
      const v1::PushChunk& push = message.push();
      if (push.chunk().index() == 0) chunks_left = push.header().chunk_count();
      if (chunks_left == 0 || --chunks_left > 0) continue;
      v1::GatewayMessage ack;
      ack.mutable_push_ack()->set_transfer_id(push.transfer_id());
      stream->Write(ack);
      on_frames_(++frames_);
    }
    return grpc::Status::OK;
  }

 private:
  std::function<void(uint64_t)> on_frames_;
  std::atomic<uint64_t> frames_{0};
};

absl::StatusOr<std::unique_ptr<RelaySink>> RelaySink::Start(
    std::shared_ptr<grpc::ServerCredentials> credentials, std::function<void(uint64_t)> on_frames) {
  std::unique_ptr<RelaySink> sink(new RelaySink);
  sink->service_ = std::make_unique<Service>(std::move(on_frames));
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", credentials, &sink->port_);
  builder.RegisterService(sink->service_.get());
  builder.SetMaxReceiveMessageSize(4 << 20);
  sink->server_ = builder.BuildAndStart();
  if (sink->server_ == nullptr || sink->port_ == 0) {
    return absl::UnavailableError("the relay sink cannot listen on 127.0.0.1");
  }
  return sink;
}

RelaySink::~RelaySink() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace strait::bench
