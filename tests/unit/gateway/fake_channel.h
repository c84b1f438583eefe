// An in-process SiteChannel that records what the gateway sends to a site.
#pragma once

#include <functional>
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
  void SendFrame(uint64_t pull_id, FramePtr frame, std::function<void()> pull_again) override {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.push_back({pull_id, std::move(frame)});
    pulls_again_.push_back(std::move(pull_again));
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
  // What the gateway asked to run should frames()[i] break off (the real channel runs it then).
  std::function<void()> pull_again(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return pulls_again_.at(i);
  }
  absl::Status closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::vector<v1::GatewayMessage> messages_;
  std::vector<std::pair<uint64_t, FramePtr>> frames_;
  std::vector<std::function<void()>> pulls_again_;
  absl::Status closed_;
};

}  // namespace strait::gateway::testing
