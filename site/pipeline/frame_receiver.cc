#include "site/pipeline/frame_receiver.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor_key.h"

namespace strait::site {

absl::StatusOr<std::unique_ptr<FrameReceiver>> FrameReceiver::Create(
    GatewayLink& link, std::unique_ptr<FrameDecoder> decoder, FrameSource source,
    SiteMetrics& metrics, int window, std::chrono::milliseconds pull_timeout) {
  if (window < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the receiver of boundary ", source.boundary, " ", v1::Direction_Name(source.direction),
        " from ", source.peer, " needs a window of at least 1 frame, got ", window));
  }
  return std::unique_ptr<FrameReceiver>(new FrameReceiver(
      link, std::move(decoder), std::move(source), metrics, window, pull_timeout));
}

FrameReceiver::FrameReceiver(GatewayLink& link, std::unique_ptr<FrameDecoder> decoder,
                             FrameSource source, SiteMetrics& metrics, int window,
                             std::chrono::milliseconds pull_timeout)
    : link_(link),
      decoder_(std::move(decoder)),
      peer_(std::move(source.peer)),
      boundary_(static_cast<uint32_t>(source.boundary)),
      direction_(source.direction),
      metrics_(metrics),
      window_(static_cast<size_t>(window)),
      pull_timeout_(pull_timeout) {
  thread_ = std::thread([this] { Run(); });
}

FrameReceiver::~FrameReceiver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void FrameReceiver::Fail(const absl::Status& status) {
  if (status_.ok()) status_ = status;
  cv_.notify_all();
}

void FrameReceiver::Stop(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  Fail(status);
}

void FrameReceiver::Expect(const v1::TensorKey& key, std::vector<int64_t> shape) {
  Announce({key, std::move(shape), /*bytes=*/false, /*payload=*/false, {}});
}

void FrameReceiver::ExpectBoundary(const v1::TensorKey& key, std::vector<int64_t> shape,
                                   bool payload) {
  Announce({key, std::move(shape), /*bytes=*/false, payload, {}});
}

void FrameReceiver::ExpectBytes(const v1::TensorKey& key) {
  Announce({key, {}, /*bytes=*/true, /*payload=*/false, {}});
}

void FrameReceiver::Announce(Expected expected) {
  std::lock_guard<std::mutex> lock(mu_);
  expected_.push_back(std::move(expected));
  // Pulled here rather than by Run, which may be waiting for an older frame.
  if (!stopping_ && status_.ok()) PullAheadLocked();
  cv_.notify_all();
}

void FrameReceiver::PullAheadLocked() {
  while (pulled_ < expected_.size() && pulled_ < window_) {
    expected_[pulled_].frame = link_.Pull(expected_[pulled_].key, pull_timeout_);
    ++pulled_;
  }
}

absl::StatusOr<std::vector<float>> FrameReceiver::Take(const v1::TensorKey& key) {
  STRAIT_ASSIGN_OR_RETURN(Ready ready, TakeReady(key));
  if (ready.tensor.encoded) {
    return absl::InternalError(absl::StrCat("Take of ", TensorKeyToString(key),
                                            ", announced as a boundary tensor (TakeBoundary)"));
  }
  return std::move(ready.tensor.values);
}

absl::StatusOr<DecodedBoundary> FrameReceiver::TakeBoundary(const v1::TensorKey& key) {
  STRAIT_ASSIGN_OR_RETURN(Ready ready, TakeReady(key));
  return std::move(ready.tensor);
}

absl::StatusOr<std::string> FrameReceiver::TakeBytes(const v1::TensorKey& key) {
  STRAIT_ASSIGN_OR_RETURN(Ready ready, TakeReady(key));
  return std::move(ready.bytes);
}

absl::StatusOr<FrameReceiver::Ready> FrameReceiver::TakeReady(const v1::TensorKey& key) {
  const std::string id = key.SerializeAsString();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_.count(id) > 0 || !status_.ok(); });
  if (!status_.ok()) return status_;
  auto it = ready_.find(id);
  Ready ready = std::move(it->second);
  ready_.erase(it);
  return ready;
}

absl::StatusOr<FrameReceiver::Ready> FrameReceiver::Decode(const Expected& expected,
                                                           ReceivedFrame frame) {
  Ready ready;
  if (expected.bytes) {
    STRAIT_ASSIGN_OR_RETURN(ready.bytes, decoder_->DecodeBytes(expected.key, std::move(frame)));
    return ready;
  }
  DecodeTimings timings;
  absl::Status decoded;
  if (expected.payload) {
    absl::StatusOr<DecodedBoundary> tensor =
        decoder_->DecodeBoundary(expected.key, expected.shape, std::move(frame), &timings);
    decoded = tensor.status();
    if (tensor.ok()) ready.tensor = *std::move(tensor);
  } else {
    absl::StatusOr<std::vector<float>> values =
        decoder_->Decode(expected.key, expected.shape, std::move(frame), &timings);
    decoded = values.status();
    if (values.ok()) ready.tensor.values = *std::move(values);
  }
  metrics_.AddTime(Timer::kOpen, timings.open_s);
  metrics_.AddTime(Timer::kDecode, timings.decode_s);
  STRAIT_RETURN_IF_ERROR(decoded);
  return ready;
}

void FrameReceiver::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Keeps `window_` pulls waiting at the gateway, oldest announcement first.
    PullAheadLocked();
    if (stopping_ || !status_.ok()) return;
    if (pulled_ == 0) {
      cv_.wait(lock, [this] { return stopping_ || !status_.ok() || !expected_.empty(); });
      continue;  // Pull what was announced.
    }
    Expected& oldest = expected_.front();
    lock.unlock();
    // Frames arrive in announcement order (the producer's order). Expect pulls new announcements
    // meanwhile; the slices only bound how long a Stop waits. (Slices of 5 ms, when this loop also
    // issued those pulls, cost the sites 5-16% of their CPU on a `satellite` link.)
    const bool arrived =
        oldest.frame.wait_for(std::chrono::milliseconds(50)) == std::future_status::ready;
    lock.lock();
    if (!arrived) continue;
    absl::StatusOr<ReceivedFrame> frame = oldest.frame.get();
    if (!frame.ok() && frame.status().code() == absl::StatusCode::kDeadlineExceeded) {
      oldest.frame = link_.Pull(oldest.key, pull_timeout_);  // The producer is slow: ask again.
      continue;
    }
    Expected done = std::move(oldest);
    expected_.pop_front();
    --pulled_;
    const std::string key_text = TensorKeyToString(done.key);
    if (!frame.ok()) {
      Fail(absl::Status(frame.status().code(), absl::StrCat("pulling ", key_text, " from ", peer_,
                                                            ": ", frame.status().message())));
      return;
    }
    lock.unlock();
    const uint64_t raw = frame->header.raw_bytes(), wire = frame->header.wire_bytes();
    absl::StatusOr<Ready> values = Decode(done, std::move(*frame));
    if (values.ok()) {
      metrics_.AddFrame(boundary_, direction_, false, raw, wire, LinkPurpose(done.key));
      link_.Ack(done.key);
    } else {
      metrics_.AddRejectedFrame();
    }
    lock.lock();
    if (!values.ok()) {
      Fail(absl::DataLossError(absl::StrCat("refused frame ", key_text, " from ", peer_, ": ",
                                            values.status().message(),
                                            " (altered or replayed in transit?)")));
      return;
    }
    ready_.emplace(done.key.SerializeAsString(), std::move(*values));
    cv_.notify_all();
  }
}

}  // namespace strait::site
