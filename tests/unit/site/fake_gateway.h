// An in-process gateway for pipeline tests: frames stored by key until acknowledged, pulls answered
// when their frame arrives, and a hook to alter frames on their way through (fault injection).
#pragma once

#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "site/pipeline/gateway_link.h"

namespace strait::site {

class FakeGateway {
 public:
  // Called on every pushed frame before it is stored (may change it).
  std::function<void(ReceivedFrame&)> on_push;

  class Link : public GatewayLink {
   public:
    explicit Link(FakeGateway& gateway) : gateway_(gateway) {}
    std::future<absl::Status> Push(v1::FrameHeader header, std::string body) override {
      return gateway_.Push({std::move(header), std::move(body)});
    }
    std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key,
                                                    std::chrono::milliseconds) override {
      return gateway_.Pull(key);
    }
    void Ack(const v1::TensorKey& key) override { gateway_.Ack(key); }
    void Report(const v1::SiteReport&) override {}
    void OnControl(std::function<void(const v1::Control&)>) override {}

   private:
    FakeGateway& gateway_;
  };

  size_t stored() {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_.size();
  }
  size_t pulls() {
    std::lock_guard<std::mutex> lock(mu_);
    return pulls_;
  }

 private:
  std::future<absl::Status> Push(ReceivedFrame frame) {
    if (on_push) on_push(frame);
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = frame.header.key().SerializeAsString();
    auto waiting = waiting_.find(id);
    if (waiting != waiting_.end()) {
      for (auto& promise : waiting->second) promise.set_value(frame);
      waiting_.erase(waiting);
    }
    frames_.emplace(id, std::move(frame));
    std::promise<absl::Status> done;
    done.set_value(absl::OkStatus());
    return done.get_future();
  }
  std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    ++pulls_;
    std::promise<absl::StatusOr<ReceivedFrame>> promise;
    auto future = promise.get_future();
    auto it = frames_.find(key.SerializeAsString());
    if (it != frames_.end()) {
      promise.set_value(it->second);
    } else {
      waiting_[key.SerializeAsString()].push_back(std::move(promise));
    }
    return future;
  }
  void Ack(const v1::TensorKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.erase(key.SerializeAsString());
  }

  std::mutex mu_;
  size_t pulls_ = 0;
  std::map<std::string, ReceivedFrame> frames_;
  std::map<std::string, std::vector<std::promise<absl::StatusOr<ReceivedFrame>>>> waiting_;
};

}  // namespace strait::site
