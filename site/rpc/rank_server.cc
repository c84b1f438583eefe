#include "site/rpc/rank_server.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "crypto/tls_policy.h"
#include "strait/v1/site_ranks.grpc.pb.h"

namespace strait::site {
namespace {

// How long a finished follower has to close its end before the stream is cancelled.
constexpr auto kCloseGrace = std::chrono::seconds(2);

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// One attached follower: orders queued by the leader, written by the stream's handler thread;
// answers read by a reader thread, taken by the leader.
class StreamLink final : public FollowerLink {
 public:
  StreamLink(int rank, grpc::ServerContext* context) : rank_(rank), context_(context) {}

  absl::Status Send(v1::RankOrder order) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || !broken_.empty()) return Gone();
    orders_.push_back(std::move(order));
    cv_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<v1::RankAnswer> Receive(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout,
                      [&] { return !answers_.empty() || closed_ || !broken_.empty(); })) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank ", rank_, " did not answer within ", timeout.count() / 1000.0,
                       " s (the site's heartbeat timeout): it hangs or its machine is overloaded"));
    }
    if (answers_.empty()) return Gone();
    v1::RankAnswer answer = std::move(answers_.front());
    answers_.pop_front();
    return answer;
  }

  void Close() override {
    std::unique_lock<std::mutex> lock(mu_);
    closed_ = true;
    cv_.notify_all();
    // The handler writes what is queued (a finish order), then returns; a follower that does not
    // take it in time is cut off.
    if (!cv_.wait_for(lock, kCloseGrace + std::chrono::seconds(1), [&] { return done_; })) {
      context_->TryCancel();
    }
  }

  bool gone() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !broken_.empty();
  }

  // The handler's side.
  std::optional<v1::RankOrder> NextOrder() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !orders_.empty() || closed_ || !broken_.empty(); });
    if (orders_.empty() || !broken_.empty()) return std::nullopt;
    v1::RankOrder order = std::move(orders_.front());
    orders_.pop_front();
    return order;
  }
  void Answered(v1::RankAnswer answer) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_.push_back(std::move(answer));
    cv_.notify_all();
  }
  void Broke(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.empty()) broken_ = why;
    cv_.notify_all();
  }
  // Waits until the reader has stopped, at most `grace`.
  bool WaitBroken(std::chrono::steady_clock::duration grace) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, grace, [&] { return !broken_.empty(); });
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  absl::Status Gone() const {
    return absl::UnavailableError(absl::StrCat(
        "rank ", rank_, closed_ ? ": its link was closed" : absl::StrCat(" is gone: ", broken_)));
  }

  const int rank_;
  grpc::ServerContext* const context_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::RankOrder> orders_;
  std::deque<v1::RankAnswer> answers_;
  bool closed_ = false;
  bool done_ = false;   // The handler has returned: context_ is gone.
  std::string broken_;  // Why the follower's side ended; empty while it reads.
};

}  // namespace

class RankServer::Service final : public v1::SiteRanks::Service {
 public:
  Service(RankServer::Options options, RankAdmission& admission)
      : options_(std::move(options)), admission_(admission) {}

  grpc::Status Attach(grpc::ServerContext* context,
                      grpc::ServerReaderWriter<v1::RankOrder, v1::RankUp>* stream) override {
    if (absl::Status s = CheckPeer(*context); !s.ok()) return ToGrpc(s);
    v1::RankUp first;
    if (!stream->Read(&first) || !first.has_hello()) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "a rank's first message must be its hello");
    }
    if (absl::Status s = admission_.Admit(first.hello(), options_.site_id); !s.ok()) {
      spdlog::warn("refused rank {} from {}: {}", first.hello().rank(), context->peer(),
                   std::string(s.message()));
      return ToGrpc(s);
    }
    const int rank = static_cast<int>(first.hello().rank());
    auto link = std::make_shared<StreamLink>(rank, context);
    admission_.Attached(rank, link, context->peer());
    std::thread reader([&] {
      v1::RankUp up;
      while (stream->Read(&up)) {
        if (!up.has_answer()) {
          link->Broke("it sent something else than an answer");
          context->TryCancel();
          return;
        }
        link->Answered(std::move(*up.mutable_answer()));
      }
      link->Broke("its stream ended (the process exited or the network failed)");
    });
    bool finished = false;
    while (std::optional<v1::RankOrder> order = link->NextOrder()) {
      finished = order->has_finish();
      if (!stream->Write(*order)) break;
    }
    // After a finish, the follower closes its end; otherwise (or if it does not) cut it off.
    if (!finished || !link->WaitBroken(kCloseGrace)) context->TryCancel();
    reader.join();
    link->Done();
    return finished ? grpc::Status::OK
                    : grpc::Status(grpc::UNAVAILABLE, "the site's group ended; attach again");
  }

  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetReply*) override {
    if (absl::Status s = CheckPeer(*context); !s.ok()) return ToGrpc(s);
    return ToGrpc(admission_.store().Set(request->key(), request->value()));
  }

  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetReply* reply) override {
    if (absl::Status s = CheckPeer(*context); !s.ok()) return ToGrpc(s);
    const double timeout_s = std::clamp(request->timeout_s(), 0.0, 3600.0);
    absl::StatusOr<std::string> value = admission_.store().Get(
        request->key(), std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    if (!value.ok()) return ToGrpc(value.status());
    reply->set_value(*std::move(value));
    return grpc::Status::OK;
  }

 private:
  // The caller's certificate must be one the federation CA issued to this very site.
  absl::Status CheckPeer(const grpc::ServerContext& context) const {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    const std::vector<grpc::string_ref> pems =
        auth ? auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)
             : std::vector<grpc::string_ref>();
    if (pems.empty()) return absl::UnauthenticatedError("a rank must present its site certificate");
    absl::StatusOr<std::string> site = crypto::VerifySiteCertificate(
        options_.tls.ca_pem, std::string(pems.front().data(), pems.front().size()),
        options_.deny_list);
    if (!site.ok()) {
      return absl::UnauthenticatedError(
          absl::StrCat("a rank's certificate is refused: ", site.status().message()));
    }
    if (*site != options_.site_id) {
      return absl::PermissionDeniedError(
          absl::StrCat("the leader of site '", options_.site_id, "' admits only ranks presenting '",
                       options_.site_id, "''s certificate; this rank presented site '", *site,
                       "''s (start each rank with its own site's --cert/--key)"));
    }
    return absl::OkStatus();
  }

  const RankServer::Options options_;
  RankAdmission& admission_;
};

absl::StatusOr<std::unique_ptr<RankServer>> RankServer::Start(Options options,
                                                              RankAdmission& admission) {
  STRAIT_RETURN_IF_ERROR(crypto::RequireTls13ForNewContexts());
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = options.tls.ca_pem;
  ssl.pem_key_cert_pairs.push_back({options.tls.own.key_pem, options.tls.own.certificate_pem});
  std::unique_ptr<RankServer> server(new RankServer());
  const std::string listen = options.listen;
  server->service_ = std::make_unique<Service>(std::move(options), admission);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::SslServerCredentials(ssl), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for the site's ranks on ", listen,
                     " (is the port in use, or the host not an address of this machine?)"));
  }
  return server;
}

RankServer::~RankServer() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + kCloseGrace);
}

}  // namespace strait::site
