// The receiving half of one link direction (DESIGN.md §4): the compute thread announces, in the
// order it will consume them, the tensors it expects; a thread of the receiver keeps pulls for the
// next `window` of them waiting at the gateway (so a frame is delivered the moment its producer
// pushes it), opens and decodes each frame as it arrives, acknowledges it, and holds the tensor
// until Take. A frame that fails to open or decode is counted and stops the receiver with an error:
// nothing unauthenticated reaches the model.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "site/exchange/frame_codec.h"
#include "site/exchange/gateway_link.h"
#include "site/pipeline/site_metrics.h"

namespace strait::site {

// Where a receiver's frames come from: the producing site (`peer`, named in errors) and the link
// direction they travel (`boundary`, `direction`: the labels of the metrics).
struct FrameSource {
  std::string peer;
  int boundary = 0;
  v1::Direction direction = v1::FORWARD;
};

class FrameReceiver {
 public:
  // Starts a receiver's thread. `link` and `metrics` must outlive the receiver. `window`: how many
  // announced frames have pulls waiting at once; INVALID_ARGUMENT naming it when it is below 1.
  static absl::StatusOr<std::unique_ptr<FrameReceiver>> Create(
      GatewayLink& link, std::unique_ptr<FrameDecoder> decoder, FrameSource source,
      SiteMetrics& metrics, int window,
      std::chrono::milliseconds pull_timeout = std::chrono::seconds(10));
  ~FrameReceiver();  // Stops the thread; pulls still waiting are abandoned.

  // Announces the next tensor to be taken. `shape`: the exact shape the frame must have. Never
  // blocks.
  void Expect(const v1::TensorKey& key, std::vector<int64_t> shape);
  // The same for a tensor taken with TakeBoundary; `payload`: left as its chain's value payload
  // when a backend runs that stage (FrameDecoder::DecodeBoundary), for a stage that takes one.
  void ExpectBoundary(const v1::TensorKey& key, std::vector<int64_t> shape, bool payload);
  // The same for a frame of opaque bytes (FrameDecoder::DecodeBytes: a teacher's targets).
  void ExpectBytes(const v1::TensorKey& key);

  // Blocks until the tensor of `key` (announced earlier) is decoded and returns it; the receiver's
  // error if it failed (a refused frame, the connection lost), or CANCELLED after Stop.
  absl::StatusOr<std::vector<float>> Take(const v1::TensorKey& key);
  // The tensor of `key`, announced with ExpectBoundary, likewise.
  absl::StatusOr<DecodedBoundary> TakeBoundary(const v1::TensorKey& key);
  // The bytes of `key` (announced with ExpectBytes), likewise.
  absl::StatusOr<std::string> TakeBytes(const v1::TensorKey& key);

  // Makes every waiting and later Take fail with `status` (e.g. the job was stopped).
  void Stop(const absl::Status& status);

 private:
  FrameReceiver(GatewayLink& link, std::unique_ptr<FrameDecoder> decoder, FrameSource source,
                SiteMetrics& metrics, int window, std::chrono::milliseconds pull_timeout);

  struct Expected {
    v1::TensorKey key;
    std::vector<int64_t> shape;
    bool bytes = false;    // A frame of bytes, not a tensor.
    bool payload = false;  // A boundary tensor that may stay a value payload.
    std::future<absl::StatusOr<ReceivedFrame>> frame;  // Valid once its pull is issued.
  };
  // A decoded frame: its tensor (floats unless announced with `payload`), or its bytes.
  struct Ready {
    DecodedBoundary tensor;
    std::string bytes;
  };
  void Announce(Expected expected);
  absl::StatusOr<Ready> TakeReady(const v1::TensorKey& key);
  // Opens and decodes `frame` as `expected` says; counts it.
  absl::StatusOr<Ready> Decode(const Expected& expected, ReceivedFrame frame);
  void Run();
  // Issues pulls for announced frames while fewer than `window_` are in flight. Requires mu_.
  void PullAheadLocked();
  void Fail(const absl::Status& status);  // Requires mu_.

  GatewayLink& link_;
  std::unique_ptr<FrameDecoder> decoder_;
  const std::string peer_;
  const uint32_t boundary_;
  const v1::Direction direction_;
  SiteMetrics& metrics_;
  const size_t window_;
  const std::chrono::milliseconds pull_timeout_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Expected> expected_;       // Announced, oldest first; the first
  size_t pulled_ = 0;                   // `pulled_` have pulls in flight.
  std::map<std::string, Ready> ready_;  // Decoded, by key bytes, until taken.
  absl::Status status_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strait::site
