#include "site/pipeline/frame_sender.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/tensor_key.h"

namespace strait::site {

absl::StatusOr<std::unique_ptr<FrameSender>> FrameSender::Create(
    GatewayLink& link, std::unique_ptr<FrameEncoder> encoder, uint32_t boundary,
    v1::Direction direction, SiteMetrics& metrics, int max_pending) {
  if (max_pending < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sender of boundary ", boundary, " ", v1::Direction_Name(direction),
                     " needs max_pending of at least 1 frame in flight, got ", max_pending));
  }
  return std::unique_ptr<FrameSender>(
      new FrameSender(link, std::move(encoder), boundary, direction, metrics, max_pending));
}

FrameSender::FrameSender(GatewayLink& link, std::unique_ptr<FrameEncoder> encoder,
                         uint32_t boundary, v1::Direction direction, SiteMetrics& metrics,
                         int max_pending)
    : link_(link),
      encoder_(std::move(encoder)),
      boundary_(boundary),
      direction_(direction),
      metrics_(metrics),
      max_pending_(max_pending) {
  encoder_thread_ = std::thread([this] { EncodeAndPush(); });
  ack_thread_ = std::thread([this] { AwaitAcks(); });
}

FrameSender::~FrameSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  encoder_thread_.join();
  ack_thread_.join();
}

void FrameSender::Fail(const absl::Status& status) {
  if (status_.ok()) status_ = status;
  cv_.notify_all();
}

absl::Status FrameSender::Send(const v1::TensorKey& key, std::vector<float> values,
                               std::vector<int64_t> shape) {
  if (!FrameEncoder::Exact(key)) ++chain_tensors_;
  return Queue({key, std::move(values), std::move(shape), std::nullopt, std::nullopt});
}

absl::Status FrameSender::SendPayload(const v1::TensorKey& key, std::vector<uint8_t> payload,
                                      std::vector<int64_t> shape) {
  if (!FrameEncoder::Exact(key)) ++chain_tensors_;
  return Queue({key, {}, std::move(shape), std::nullopt, std::move(payload)});
}

absl::Status FrameSender::SendBytes(const v1::TensorKey& key, std::string bytes) {
  return Queue({key, {}, {}, std::move(bytes), std::nullopt});
}

absl::Status FrameSender::Queue(Item item) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return in_flight_ < max_pending_ || !status_.ok(); });
  if (!status_.ok()) return status_;
  queue_.push_back(std::move(item));
  ++in_flight_;
  cv_.notify_all();
  return absl::OkStatus();
}

void FrameSender::Stop(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  Fail(status);
}

absl::Status FrameSender::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return in_flight_ == 0 || !status_.ok(); });
  return status_;
}

void FrameSender::EncodeAndPush() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    absl::StatusOr<FrameEncoder::Frame> frame =
        item.bytes     ? encoder_->EncodeBytes(item.key, *item.bytes)
        : item.payload ? encoder_->EncodePayload(item.key, *item.payload, item.shape)
                       : encoder_->Encode(item.key, item.values, item.shape);
    std::future<absl::Status> acked;
    if (frame.ok()) {
      metrics_.AddTime(Timer::kEncode, frame->encode_s);
      metrics_.AddTime(Timer::kSeal, frame->seal_s);
      metrics_.AddFrame(boundary_, direction_, true, frame->header.raw_bytes(),
                        frame->header.wire_bytes(), LinkPurpose(item.key));
      // Blocks while the gateway's budget is full (flow control).
      acked = link_.Push(std::move(frame->header), std::move(frame->body));
    }
    lock.lock();
    if (!frame.ok()) {
      Fail(absl::Status(
          frame.status().code(),
          absl::StrCat("encoding ", TensorKeyToString(item.key), ": ", frame.status().message())));
      continue;
    }
    pushed_.push_back({std::move(acked), item.key});
    cv_.notify_all();
  }
}

void FrameSender::AwaitAcks() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !pushed_.empty(); });
    if (stopping_) return;
    Pushed pushed = std::move(pushed_.front());
    pushed_.pop_front();
    lock.unlock();
    // Waits in slices so that stopping never hangs on a gateway that does not answer.
    while (pushed.acked.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      std::lock_guard<std::mutex> check(mu_);
      if (stopping_) return;
    }
    absl::Status status = pushed.acked.get();
    lock.lock();
    if (!status.ok()) {
      Fail(absl::Status(status.code(),
                        absl::StrCat("the gateway refused ", TensorKeyToString(pushed.key), ": ",
                                     status.message())));
    }
    --in_flight_;
    cv_.notify_all();
  }
}

}  // namespace strait::site
