// An in-process gateway for pipeline and session tests: frames stored by key until acknowledged,
// pulls answered when their frame arrives, a hook to alter frames on their way through (fault
// injection), frames held back from their consumers (so a test decides where training stands),
// control messages sent to the sites' links, and the sites' reports recorded.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "site/exchange/gateway_link.h"

namespace strait::site {

class FakeGateway {
 public:
  // Called on every pushed frame before it is stored (may change it).
  std::function<void(ReceivedFrame&)> on_push;

  // What one site holds: its reports go to the gateway under `site_id`, and Send reaches the
  // handler it sets. Must not outlive the gateway.
  class Link : public GatewayLink {
   public:
    explicit Link(FakeGateway& gateway, std::string site_id = "")
        : gateway_(gateway), site_id_(std::move(site_id)) {}
    ~Link() override { gateway_.Listen(this, nullptr); }
    std::future<absl::Status> Push(v1::FrameHeader header, std::string body) override {
      return gateway_.Push({std::move(header), std::move(body)});
    }
    std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key,
                                                    std::chrono::milliseconds) override {
      return gateway_.Pull(key);
    }
    void Ack(const v1::TensorKey& key) override { gateway_.Ack(key); }
    void Report(const v1::SiteReport& report) override { gateway_.Record(site_id_, report); }
    void OnControl(std::function<void(const v1::Control&)> handler) override {
      gateway_.Listen(this, std::move(handler));
    }
    const std::string& site_id() const { return site_id_; }

   private:
    FakeGateway& gateway_;
    const std::string site_id_;
  };

  size_t stored() {
    std::lock_guard<std::mutex> lock(mu_);
    return frames_.size();
  }
  size_t pulls() {
    std::lock_guard<std::mutex> lock(mu_);
    return pulls_;
  }
  size_t pushes() {
    std::lock_guard<std::mutex> lock(mu_);
    return pushes_;
  }

  // Frames whose key matches `held` are taken (their pushes succeed) but kept from their consumers
  // until Release(): training stops at the first step that needs one.
  void Hold(std::function<bool(const v1::TensorKey&)> held) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = std::move(held);
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = nullptr;
    for (ReceivedFrame& frame : parked_) StoreLocked(std::move(frame));
    parked_.clear();
  }

  // Sends `control` to the handler of every link of `site_id` (of every link when empty), one
  // message at a time, like the control stream of a real gateway.
  void Send(const v1::Control& control, const std::string& site_id = "") {
    std::lock_guard<std::mutex> send_lock(send_mu_);
    std::vector<std::function<void(const v1::Control&)>> handlers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [link, handler] : handlers_) {
        if (site_id.empty() || link->site_id() == site_id) handlers.push_back(handler);
      }
    }
    for (const auto& handler : handlers) handler(control);
  }

  // The reports of `site_id` so far.
  std::vector<v1::SiteReport> reports(const std::string& site_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_[site_id];
  }
  // Blocks until a report of `site_id` matches, or `timeout` (false).
  bool WaitForReport(const std::string& site_id,
                     const std::function<bool(const v1::SiteReport&)>& match,
                     std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const v1::SiteReport& report : reports_[site_id]) {
        if (match(report)) return true;
      }
      return false;
    });
  }

 private:
  std::future<absl::Status> Push(ReceivedFrame frame) {
    if (on_push) on_push(frame);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pushes_;
      if (held_ && held_(frame.header.key())) {
        parked_.push_back(std::move(frame));
      } else {
        StoreLocked(std::move(frame));
      }
    }
    std::promise<absl::Status> done;
    done.set_value(absl::OkStatus());
    return done.get_future();
  }
  void StoreLocked(ReceivedFrame frame) {
    const std::string id = frame.header.key().SerializeAsString();
    auto waiting = waiting_.find(id);
    if (waiting != waiting_.end()) {
      for (auto& promise : waiting->second) promise.set_value(frame);
      waiting_.erase(waiting);
    }
    frames_.emplace(id, std::move(frame));
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
  void Record(const std::string& site_id, const v1::SiteReport& report) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reports_[site_id].push_back(report);
    }
    cv_.notify_all();
  }
  void Listen(Link* link, std::function<void(const v1::Control&)> handler) {
    std::lock_guard<std::mutex> lock(mu_);
    if (handler) {
      handlers_[link] = std::move(handler);
    } else {
      handlers_.erase(link);
    }
  }

  std::mutex send_mu_;  // One control message at a time.
  std::mutex mu_;
  std::condition_variable cv_;  // A report arrived.
  size_t pulls_ = 0;
  size_t pushes_ = 0;
  std::map<std::string, ReceivedFrame> frames_;
  std::map<std::string, std::vector<std::promise<absl::StatusOr<ReceivedFrame>>>> waiting_;
  std::function<bool(const v1::TensorKey&)> held_;
  std::vector<ReceivedFrame> parked_;
  std::map<Link*, std::function<void(const v1::Control&)>> handlers_;
  std::map<std::string, std::vector<v1::SiteReport>> reports_;
};

}  // namespace strait::site
