// An in-process SiteChannel that records what the gateway sends to a site.
#pragma once

#include <mutex>
#include <vector>

#include "gateway/membership/site_channel.h"

namespace strait::gateway::testing {

class FakeChannel : public SiteChannel {
 public:
  void Send(v1::GatewayMessage message) override {
    std::lock_guard<std::mutex> lock(mu_);
    messages_.push_back(std::move(message));
  }
  void SendFrame(uint64_t pull_id, FramePtr frame) override {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.push_back({pull_id, std::move(frame)});
  }
  void Close(absl::Status status) override {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = status;
  }

  std::vector<v1::GatewayMessage> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  std::vector<std::pair<uint64_t, FramePtr>> frames() {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_;
  }
  absl::Status closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::vector<v1::GatewayMessage> messages_;
  std::vector<std::pair<uint64_t, FramePtr>> frames_;
  absl::Status closed_;
};

}  // namespace strait::gateway::testing
