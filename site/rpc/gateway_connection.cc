#include "site/rpc/gateway_connection.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/join_request.h"
#include "core/status.h"
#include "site/rpc/gateway_client.h"
#include "site/rpc/tls_credentials.h"

namespace strait::site {
namespace {

using Clock = std::chrono::steady_clock;

template <typename T>
std::future<T> Ready(T value) {
  std::promise<T> promise;
  promise.set_value(std::move(value));
  return promise.get_future();
}

absl::Status NotConnected() { return absl::UnavailableError("not connected to the gateway"); }

}  // namespace

struct GatewayConnection::Dial {
  GatewayClient::Options options;
};

GatewayConnection::GatewayConnection(Options options, ConnectionEvents events)
    : options_(std::move(options)), events_(std::move(events)), dial_(std::make_unique<Dial>()) {
  const JobSpec& spec = *options_.spec;
  GatewayClient::Options& o = dial_->options;
  o.address = spec.gateway.address;
  o.chunk_bytes = spec.gateway.chunk_size;
  o.join_timeout = options_.join_timeout;  // Each join makes the credentials (which can fail).
  o.on_control = events_.control;
  o.on_disconnect = events_.lost;
}

GatewayConnection::~GatewayConnection() { (void)Close(); }

absl::StatusOr<v1::JoinReply> GatewayConnection::Join(std::optional<int64_t> checkpoint) {
  const JobSpec& spec = *options_.spec;
  // Every join is a new epoch with a fresh ephemeral link key (the gateway refuses older epochs).
  // Epochs count seconds, so a process's first join waits for the next second: a site killed and
  // restarted within one second (a cached profile makes that quick) would otherwise offer the
  // epoch its last process had, and be refused.
  auto seconds_now = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::system_clock::now().time_since_epoch());
  };
  if (epoch_ == 0) {
    const auto next = seconds_now() + std::chrono::seconds(1);
    std::this_thread::sleep_until(std::chrono::system_clock::time_point(next));
  }
  const auto now_s = static_cast<uint32_t>(seconds_now().count());
  epoch_ = std::max({now_s, epoch_ + 1, options_.min_epoch});
  STRAIT_ASSIGN_OR_RETURN(security_, LinkSecurity::Create(spec.name, epoch_, options_.tls.own,
                                                          options_.tls.ca_pem, options_.deny_list));
  v1::JoinRequest join =
      options_.teacher_stage >= 0
          ? TeacherJoinRequest(spec, options_.teacher_stage, security_->own_key())
      : options_.view != nullptr
          ? JoinRequestFor(spec, *options_.view, options_.index, security_->own_key())
          : JoinRequestFor(spec, options_.index, security_->own_key());
  join.set_total_steps(static_cast<uint64_t>(options_.total_steps));
  if (checkpoint) {
    join.set_has_checkpoint(true);
    join.set_checkpoint_step(static_cast<uint64_t>(*checkpoint));
  }
  if (events_.joining) events_.joining();
  GatewayClient::Options dial;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dial = dial_->options;  // OnControl may change the handler meanwhile.
  }
  STRAIT_ASSIGN_OR_RETURN(dial.credentials, MakeSiteChannelCredentials(options_.tls));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<GatewayClient> joined,
                          GatewayClient::Connect(std::move(dial), join));
  v1::JoinReply reply = joined->join_reply();
  std::shared_ptr<GatewayClient> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    previous = std::exchange(client_, std::move(joined));
  }
  return reply;  // `previous` (normally none) closes here, outside the lock.
}

absl::StatusOr<v1::JoinReply> GatewayConnection::Rejoin(std::optional<int64_t> checkpoint) {
  (void)Close();  // The lost connection.
  const auto give_up = Clock::now() + std::chrono::duration<double>(options_.reconnect_timeout_s);
  std::mt19937 random(std::random_device{}());
  double backoff_s = 0.25;
  absl::Status last;
  while (Clock::now() < give_up) {
    absl::StatusOr<v1::JoinReply> reply = Join(checkpoint);
    if (reply.ok()) {
      spdlog::info("joined the gateway at {} again (epoch {})", address(), epoch_);
      return reply;
    }
    last = reply.status();
    // Jitter keeps the sites of a federation from all dialling a restarted gateway at once.
    backoff_s = std::min(backoff_s * 2, 8.0);
    const double wait_s = backoff_s * std::uniform_real_distribution<double>(0.5, 1.0)(random);
    spdlog::warn("cannot reach the gateway at {} ({}); trying again in {:.1f} s", address(),
                 std::string(last.message()), wait_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
  }
  return absl::UnavailableError(
      absl::StrCat("lost the gateway at ", address(), " and could not join it again within ",
                   options_.reconnect_timeout_s, " s (", last.message(), ")."));
}

absl::Status GatewayConnection::Close() {
  std::shared_ptr<GatewayClient> client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    client = std::move(client_);
  }
  return client == nullptr ? absl::OkStatus() : client->Close();
}

std::shared_ptr<GatewayClient> GatewayConnection::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return client_;
}

std::future<absl::Status> GatewayConnection::Push(v1::FrameHeader header, std::string body) {
  std::shared_ptr<GatewayClient> client = current();
  if (client == nullptr) return Ready(NotConnected());
  return client->Push(std::move(header), std::move(body));
}

std::future<absl::StatusOr<ReceivedFrame>> GatewayConnection::Pull(
    const v1::TensorKey& key, std::chrono::milliseconds timeout) {
  std::shared_ptr<GatewayClient> client = current();
  if (client == nullptr) return Ready<absl::StatusOr<ReceivedFrame>>(NotConnected());
  return client->Pull(key, timeout);
}

void GatewayConnection::Ack(const v1::TensorKey& key) {
  if (std::shared_ptr<GatewayClient> client = current()) client->Ack(key);
}

void GatewayConnection::Report(const v1::SiteReport& report) {
  if (std::shared_ptr<GatewayClient> client = current()) client->Report(report);
}

void GatewayConnection::OnControl(std::function<void(const v1::Control&)> handler) {
  std::shared_ptr<GatewayClient> client;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dial_->options.on_control = handler;
    client = client_;
  }
  if (client != nullptr) client->OnControl(std::move(handler));
}

}  // namespace strait::site
