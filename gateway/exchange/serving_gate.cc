#include "gateway/exchange/serving_gate.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"
#include "core/status.h"
#include "core/tensor_key.h"

namespace strait::gateway {

// One request while its tokens come in: the key of the next, the reply so far.
struct ServingGate::Call {
  v1::TensorKey next;  // SERVE, BACKWARD, boundary 1, position `next.microbatch()`.
  uint32_t last_position = 0;
  Mailbox::Clock::time_point start;
  v1::GenerateReply reply;
  std::function<void(absl::StatusOr<v1::GenerateReply>)> done;
};

namespace {
// How long one token may take on the whole pipeline before the request fails.
constexpr auto kTokenDeadline = std::chrono::seconds(60);
}  // namespace

absl::Status ServingGate::Authorize(const std::string& client) {
  const std::vector<std::string>& clients = spec_.serving.clients;
  if (std::find(clients.begin(), clients.end(), client) != clients.end()) return absl::OkStatus();
  const absl::Status refused = absl::PermissionDeniedError(
      absl::StrCat("'", client, "' may not ask this federation to sample: ",
                   clients.empty() ? std::string("its job serves nobody (no serving.clients)")
                                   : "it is not one of the job's serving.clients"));
  federation_.CountRejected("unauthorized_client", std::string(refused.message()));
  return refused;
}

absl::StatusOr<v1::ServeKeysReply> ServingGate::Keys(const std::string& client) {
  STRAIT_RETURN_IF_ERROR(Authorize(client));
  STRAIT_ASSIGN_OR_RETURN(const Federation::ServingEnds ends, federation_.Ends());
  v1::ServeKeysReply reply;
  reply.set_request(next_request_.fetch_add(1));
  reply.set_generation(ends.generation);
  *reply.mutable_first() = ends.first;
  *reply.mutable_last() = ends.last;
  reply.set_stages(static_cast<uint32_t>(spec_.Stages()));
  return reply;
}

absl::Status ServingGate::CheckPrompt(const v1::GenerateRequest& request) const {
  const v1::FrameHeader& header = request.prompt();
  STRAIT_RETURN_IF_ERROR(ValidateFrameHeader(header, spec_, max_frame_bytes_));
  const v1::TensorKey& key = header.key();
  if (key.purpose() != v1::SERVE || ProducerSlot(key, spec_) != -1 || key.microbatch() != 0 ||
      key.step() == 0 || key.step() >= next_request_.load()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt's key ", TensorKeyToString(key),
                     " is not a prompt of a request this gateway handed out (ServeKeys)"));
  }
  if (header.chunk_count() != 1 || request.prompt_body().size() != header.wire_bytes()) {
    return absl::InvalidArgumentError("the prompt is not one chunk of the size its header says");
  }
  const int64_t tokens = header.shape_size() == 1 ? header.shape(0) : 0;
  if (tokens < 1 || tokens >= spec_.model.gpt.context) {
    return absl::InvalidArgumentError(absl::StrCat("a prompt of ", tokens,
                                                   " tokens; expected 1 to ",
                                                   spec_.model.gpt.context - 1, " (the context)"));
  }
  if (request.tokens() < 1) return absl::InvalidArgumentError("asks for no tokens");
  if (request.key().site_id().empty()) return absl::InvalidArgumentError("no client key");
  return absl::OkStatus();
}

void ServingGate::Generate(const std::string& client, const v1::GenerateRequest& request,
                           std::function<void(absl::StatusOr<v1::GenerateReply>)> done) {
  absl::Status refused = Authorize(client);
  if (refused.ok() && request.key().site_id() != client) {
    refused = absl::PermissionDeniedError("the request's key is not the caller's");
  }
  if (refused.ok()) refused = CheckPrompt(request);
  if (!refused.ok()) {
    done(refused);
    return;
  }
  const v1::FrameHeader& header = request.prompt();
  const auto prompt_tokens = static_cast<uint32_t>(header.shape(0));
  const uint32_t tokens =
      std::min<uint32_t>(request.tokens(), spec_.model.gpt.context - prompt_tokens);
  v1::GatewayMessage message;
  v1::ServeRequest& serve = *message.mutable_control()->mutable_serve();
  serve.set_request(header.key().step());
  serve.set_generation(header.key().generation());
  *serve.mutable_client() = request.key();
  serve.set_prompt_tokens(prompt_tokens);
  serve.set_tokens(tokens);
  serve.set_temperature(request.temperature());
  serve.set_top_k(request.top_k());
  serve.set_seed(request.seed());

  auto call = std::make_shared<Call>();
  call->next = header.key();
  call->next.set_direction(v1::BACKWARD);
  call->next.set_boundary(1);
  call->next.set_microbatch(prompt_tokens);
  call->last_position = prompt_tokens + tokens - 1;
  call->start = Mailbox::Clock::now();
  call->done = std::move(done);
  // The prompt goes into the mailbox as if its producer had pushed it (once its bytes are
  // reserved), then every stage hears of the request, then the tokens are awaited.
  auto prompt =
      std::make_shared<const StoredFrame>(header, std::vector<std::string>{request.prompt_body()});
  auto start = [this, prompt, message, call] {
    mailbox_.Store(prompt);
    federation_.SendToStages(message);
    PullNext(call);
  };
  absl::StatusOr<bool> reserved = mailbox_.Reserve(header.wire_bytes(), start);
  if (!reserved.ok()) {
    call->done(reserved.status());
  } else if (*reserved) {
    start();
  }
}

void ServingGate::PullNext(std::shared_ptr<Call> call) {
  const MailboxKey key = MailboxKey::From(call->next);
  const absl::Status pulled = mailbox_.Pull(
      mailbox_.NewPullId(), key, Mailbox::Clock::now() + kTokenDeadline,
      [this, call](absl::StatusOr<FramePtr> frame) {
        if (frame.ok() && !(*frame)->complete()) {
          frame = absl::DataLossError("the token's frame broke off");  // One chunk: never partial.
        }
        if (!frame.ok()) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            state_.set_failed(state_.failed() + 1);
          }
          call->done(
              absl::Status(frame.status().code(),
                           absl::StrCat("waiting for the token of position ",
                                        call->next.microbatch(), ": ", frame.status().message())));
          return;
        }
        v1::ServedToken& token = *call->reply.add_tokens();
        *token.mutable_header() = (*frame)->header;
        for (uint32_t c = 0; c < (*frame)->chunk_count(); ++c) {
          token.mutable_body()->append((*frame)->chunk(c));
        }
        (void)mailbox_.Ack(MailboxKey::From(call->next));
        if (call->next.microbatch() < call->last_position) {
          call->next.set_microbatch(call->next.microbatch() + 1);
          PullNext(call);
          return;
        }
        const double seconds =
            std::chrono::duration<double>(Mailbox::Clock::now() - call->start).count();
        call->reply.set_seconds(seconds);
        {
          std::lock_guard<std::mutex> lock(mu_);
          state_.set_requests(state_.requests() + 1);
          state_.set_tokens(state_.tokens() + call->reply.tokens_size());
          state_.set_seconds(state_.seconds() + seconds);
        }
        call->done(std::move(call->reply));
      });
  if (!pulled.ok()) call->done(pulled);
}

v1::ServingState ServingGate::State() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

}  // namespace strait::gateway
