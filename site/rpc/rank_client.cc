#include "site/rpc/rank_client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "crypto/tls_policy.h"
#include "strait/v1/site_ranks.grpc.pb.h"

namespace strait::site {
namespace {

namespace gx = grpc::experimental;

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// Accepts the leader's certificate only when the federation CA issued it to this site.
class LeaderVerifier final : public gx::ExternalCertificateVerifier {
 public:
  LeaderVerifier(std::string ca_pem, std::string site_id, crypto::DenyList deny_list)
      : ca_pem_(std::move(ca_pem)),
        site_id_(std::move(site_id)),
        deny_list_(std::move(deny_list)) {}

  bool Verify(gx::TlsCustomVerificationCheckRequest* request, std::function<void(grpc::Status)>,
              grpc::Status* sync_status) override {
    const grpc::string_ref pem = request->peer_cert();
    absl::StatusOr<std::string> site =
        crypto::VerifySiteCertificate(ca_pem_, std::string(pem.data(), pem.size()), deny_list_);
    if (!site.ok()) {
      *sync_status = grpc::Status(
          grpc::UNAUTHENTICATED,
          absl::StrCat("the leader's certificate is refused: ", site.status().message()));
    } else if (*site != site_id_) {
      *sync_status = grpc::Status(grpc::UNAUTHENTICATED,
                                  absl::StrCat("the leader presents site '", *site,
                                               "''s certificate, not '", site_id_, "''s"));
    } else {
      *sync_status = grpc::Status::OK;
    }
    return true;  // Decided synchronously.
  }
  void Cancel(gx::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::string ca_pem_, site_id_;
  const crypto::DenyList deny_list_;
};

// The leader's store through StoreSet / StoreGet.
class RemoteStore final : public RendezvousStore {
 public:
  explicit RemoteStore(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::SiteRanks::NewStub(std::move(channel))) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::StoreSetRequest request;
    request.set_key(key);
    request.set_value(value);
    v1::StoreSetReply reply;
    return FromGrpc(stub_->StoreSet(&context, request, &reply));
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(5));
    v1::StoreGetRequest request;
    request.set_key(key);
    request.set_timeout_s(timeout.count() / 1000.0);
    v1::StoreGetReply reply;
    STRAIT_RETURN_IF_ERROR(FromGrpc(stub_->StoreGet(&context, request, &reply)));
    return std::move(*reply.mutable_value());
  }

 private:
  std::unique_ptr<v1::SiteRanks::Stub> stub_;
};

class GrpcLeaderLink final : public LeaderLink {
 public:
  explicit GrpcLeaderLink(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::SiteRanks::NewStub(channel)), store_(channel) {}
  ~GrpcLeaderLink() override {
    context_.TryCancel();
    if (stream_ != nullptr && !finished_) stream_->Finish().IgnoreError();
  }

  absl::Status Open(const v1::RankHello& hello) {
    stream_ = stub_->Attach(&context_);
    v1::RankUp up;
    *up.mutable_hello() = hello;
    if (!stream_->Write(up)) return Ended();
    return absl::OkStatus();
  }

  absl::StatusOr<v1::RankOrder> Next() override {
    v1::RankOrder order;
    if (!stream_->Read(&order)) return Ended();
    return order;
  }

  absl::Status Answer(const v1::RankAnswer& answer) override {
    v1::RankUp up;
    *up.mutable_answer() = answer;
    if (!stream_->Write(up)) return Ended();
    return absl::OkStatus();
  }

  RendezvousStore& store() override { return store_; }

 private:
  // Why the stream ended, once: the leader's status (its refusal, or the group's end).
  absl::Status Ended() {
    if (!finished_) {
      finished_ = true;
      stream_->WritesDone();
      const grpc::Status s = stream_->Finish();
      ended_ = s.ok() ? absl::UnavailableError("the leader closed the link") : FromGrpc(s);
    }
    return ended_;
  }

  std::unique_ptr<v1::SiteRanks::Stub> stub_;
  RemoteStore store_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::RankUp, v1::RankOrder>> stream_;
  bool finished_ = false;  // Finish was called (once only).
  absl::Status ended_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LeaderLink>> AttachToLeader(const LeaderAddress& leader,
                                                           const v1::RankHello& hello) {
  STRAIT_RETURN_IF_ERROR(crypto::RequireTls13ForNewContexts());
  auto provider = std::make_shared<gx::StaticDataCertificateProvider>(
      leader.tls.ca_pem, std::vector<gx::IdentityKeyCertPair>{
                             {leader.tls.own.key_pem, leader.tls.own.certificate_pem}});
  gx::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // A site certificate is a client certificate naming no host: LeaderVerifier checks the chain,
  // its use and the site identity instead of the default server checks.
  options.set_verify_server_certs(false);
  options.set_check_call_host(false);
  options.set_certificate_verifier(gx::ExternalCertificateVerifier::Create<LeaderVerifier>(
      leader.tls.ca_pem, leader.site_id, leader.deny_list));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(leader.address, gx::TlsCredentials(options), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + leader.connect_timeout)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the leader of site '", leader.site_id, "' at ", leader.address,
        " (is it started with --rank 0 and listening there? A certificate the federation CA did "
        "not issue to this site is refused in the TLS handshake)"));
  }
  auto link = std::make_unique<GrpcLeaderLink>(std::move(channel));
  STRAIT_RETURN_IF_ERROR(link->Open(hello));
  return link;
}

}  // namespace strait::site
