// The sending half of one link direction (DESIGN.md §4): tensors handed over by the compute thread
// are encoded, sealed and pushed to the gateway on a thread of their own, so that sending
// microbatch m overlaps computing microbatch m+1. Pushes are acknowledged by the gateway
// asynchronously; at most `max_pending` tensors are queued or unacknowledged, after which Send
// blocks (back-pressure from the gateway's memory budget reaches the compute thread instead of
// growing a queue).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "site/exchange/frame_codec.h"
#include "site/exchange/gateway_link.h"
#include "site/pipeline/site_metrics.h"

namespace strait::site {

class FrameSender {
 public:
  // Starts a sender's threads. `link` and `metrics` must outlive the sender. `boundary` and
  // `direction` label the metrics. INVALID_ARGUMENT naming `max_pending` when it is below 1.
  static absl::StatusOr<std::unique_ptr<FrameSender>> Create(GatewayLink& link,
                                                             std::unique_ptr<FrameEncoder> encoder,
                                                             uint32_t boundary,
                                                             v1::Direction direction,
                                                             SiteMetrics& metrics, int max_pending);
  // Stops the threads; tensors not yet pushed are dropped (call Flush first to keep them).
  ~FrameSender();

  // Queues a tensor for `key`. Blocks while max_pending tensors are in flight. Returns the first
  // error of an earlier send, if any (then nothing more is sent). Called by one thread.
  absl::Status Send(const v1::TensorKey& key, std::vector<float> values,
                    std::vector<int64_t> shape);
  // The same for a tensor whose link-chain value stage ran elsewhere (a backend, on this thread):
  // `payload` is what device_value_stage() wrote with seed next_chain_seed() taken right before
  // (FrameEncoder::EncodePayload).
  absl::Status SendPayload(const v1::TensorKey& key, std::vector<uint8_t> payload,
                           std::vector<int64_t> shape);
  // The same for opaque bytes (FrameEncoder::EncodeBytes: a teacher's targets).
  absl::Status SendBytes(const v1::TensorKey& key, std::string bytes);

  // The link chain's first stage when a backend runs it (null otherwise), and the seed its next
  // tensor (the next Send or SendPayload of a key that is not exact) is quantized with. For the
  // thread that calls Send.
  const compression::StageSpec* device_value_stage() const {
    return encoder_->device_value_stage();
  }
  uint64_t next_chain_seed() const { return encoder_->SeedOf(chain_tensors_); }

  // Blocks until the gateway holds every tensor sent so far; the first error, if any.
  absl::Status Flush();

  // Makes a blocked and every later Send or Flush return `status`. Thread-safe.
  void Stop(const absl::Status& status);

 private:
  FrameSender(GatewayLink& link, std::unique_ptr<FrameEncoder> encoder, uint32_t boundary,
              v1::Direction direction, SiteMetrics& metrics, int max_pending);

  struct Item {
    v1::TensorKey key;
    std::vector<float> values;
    std::vector<int64_t> shape;
    std::optional<std::string> bytes;             // Set: a frame of bytes, not a tensor.
    std::optional<std::vector<uint8_t>> payload;  // Set: a value payload, not floats.
  };
  absl::Status Queue(Item item);
  struct Pushed {
    std::future<absl::Status> acked;
    v1::TensorKey key;
  };
  void EncodeAndPush();
  void AwaitAcks();
  void Fail(const absl::Status& status);  // Requires mu_.

  GatewayLink& link_;
  std::unique_ptr<FrameEncoder> encoder_;
  const uint32_t boundary_;
  const v1::Direction direction_;
  SiteMetrics& metrics_;
  const int max_pending_;
  uint64_t chain_tensors_ = 0;  // Tensors queued for the link chain (Send's thread only).

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;     // Waiting to be encoded.
  std::deque<Pushed> pushed_;  // Pushed, waiting for the gateway's acknowledgement.
  int in_flight_ = 0;          // Queued + being encoded + pushed and not yet acknowledged.
  absl::Status status_;
  bool stopping_ = false;
  std::thread encoder_thread_, ack_thread_;
};

}  // namespace strait::site
