#include "site/pipeline/stage_server.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/counter_rng.h"
#include "site/nn/text_generator.h"

namespace strait::site {

StageServer::StageServer(const JobSpec& spec, int index, uint32_t generation,
                         std::unique_ptr<KvDecoder> decoder, ServeLinkMaker make_links)
    : spec_(spec),
      index_(index),
      generation_(generation),
      decoder_(std::move(decoder)),
      make_links_(std::move(make_links)) {}

void StageServer::Push(const v1::ServeRequest& request) {
  if (request.generation() != generation_) return;  // Its frames went with its generation.
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(request);
  cv_.notify_all();
}

void StageServer::Abort(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.ok()) aborted_ = status;
  if (current_ != nullptr) {
    for (FrameReceiver* in : {current_->in.get(), current_->tokens_in.get()}) {
      if (in) in->Stop(status);
    }
    for (FrameSender* out :
         {current_->out.get(), current_->tokens_out.get(), current_->client_out.get()}) {
      if (out) out->Stop(status);
    }
  }
  cv_.notify_all();
}

v1::TensorKey StageServer::Key(uint64_t request, int position, int boundary,
                               v1::Direction direction) const {
  v1::TensorKey key;
  key.set_job(spec_.name);
  key.set_step(request);
  key.set_microbatch(static_cast<uint32_t>(position));
  key.set_boundary(static_cast<uint32_t>(boundary));
  key.set_direction(direction);
  key.set_purpose(v1::SERVE);
  key.set_generation(generation_);
  return key;
}

absl::StatusOr<StepResult> StageServer::Step(bool /*then_evaluate*/) {
  v1::ServeRequest request;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || !aborted_.ok(); });
    if (!aborted_.ok()) return aborted_;
    request = std::move(queue_.front());
    queue_.pop_front();
  }
  STRAIT_ASSIGN_OR_RETURN(ServeLinks links, make_links_(request));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return aborted_;
    current_ = &links;
  }
  absl::Status served = Serve(request, links);
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = nullptr;
  }
  STRAIT_RETURN_IF_ERROR(served);
  return StepResult{.step = served_++};
}

// Positions go in groups: the prompt's [0, P), then each sampled token's but the last's. After a
// group the last stage samples the token of the position that follows it.
absl::Status StageServer::Serve(const v1::ServeRequest& request, ServeLinks& links) {
  const int stages = spec_.Stages();
  const bool first = index_ == 0, last = index_ == stages - 1;
  const int prompt = static_cast<int>(request.prompt_tokens());
  const int tokens = static_cast<int>(request.tokens());
  const int dim = spec_.model.gpt.dim;
  const uint64_t id = request.request();
  auto group_start = [&](int g) { return g == 0 ? 0 : prompt + g - 1; };
  auto group_size = [&](int g) { return g == 0 ? prompt : 1; };
  // Every frame this stage takes, announced in order.
  for (int g = 0; g < tokens; ++g) {
    const int start = group_start(g), n = group_size(g);
    if (!first) {
      links.in->Expect(Key(id, start, index_ - 1, v1::FORWARD), {n, dim});
    } else if (g == 0) {
      links.in->Expect(Key(id, 0, stages - 1, v1::FORWARD), {n});
    } else if (stages > 1) {
      links.tokens_in->Expect(Key(id, start, 0, v1::BACKWARD), {1});
    }
  }
  decoder_->Reset();
  SamplingOptions sampling{.temperature = request.temperature(),
                           .top_k = static_cast<int>(request.top_k()),
                           .seed = request.seed()};
  float sampled = 0;  // A stage that is both first and last keeps its token.
  for (int g = 0; g < tokens; ++g) {
    const int start = group_start(g), n = group_size(g);
    std::vector<float> input;
    if (!first) {
      STRAIT_ASSIGN_OR_RETURN(input, links.in->Take(Key(id, start, index_ - 1, v1::FORWARD)));
    } else if (g == 0) {
      STRAIT_ASSIGN_OR_RETURN(input, links.in->Take(Key(id, 0, stages - 1, v1::FORWARD)));
    } else if (stages > 1) {
      STRAIT_ASSIGN_OR_RETURN(input, links.tokens_in->Take(Key(id, start, 0, v1::BACKWARD)));
    } else {
      input = {sampled};
    }
    const size_t width = first ? 1 : static_cast<size_t>(dim);
    std::vector<float> output, row;
    for (int i = 0; i < n; ++i) {
      STRAIT_ASSIGN_OR_RETURN(row,
                              decoder_->Step(absl::MakeConstSpan(input.data() + i * width, width)));
      if (!last) output.insert(output.end(), row.begin(), row.end());
    }
    if (!last) {
      STRAIT_RETURN_IF_ERROR(
          links.out->Send(Key(id, start, index_, v1::FORWARD), std::move(output), {n, dim}));
      continue;
    }
    // `row` holds the logits of the group's last position: the token of the next one.
    sampled = static_cast<float>(SampleToken(row, sampling, CounterUniform(request.seed(), g)));
    const int position = start + n;
    STRAIT_RETURN_IF_ERROR(
        links.client_out->Send(Key(id, position, 1, v1::BACKWARD), {sampled}, {1}));
    if (stages > 1 && g + 1 < tokens) {
      STRAIT_RETURN_IF_ERROR(
          links.tokens_out->Send(Key(id, position, 0, v1::BACKWARD), {sampled}, {1}));
    }
  }
  for (FrameSender* out : {links.out.get(), links.tokens_out.get(), links.client_out.get()}) {
    if (out) STRAIT_RETURN_IF_ERROR(out->Flush());
  }
  return absl::OkStatus();
}

}  // namespace strait::site
