#include "gateway/mailbox/stored_frame.h"

namespace strait::gateway {

StoredFrame::StoredFrame(v1::FrameHeader header) : header(std::move(header)) {}

StoredFrame::StoredFrame(v1::FrameHeader header, std::vector<std::string> chunks)
    : header(std::move(header)) {
  for (std::string& data : chunks) chunks_.push_back(std::move(data));
}

uint32_t StoredFrame::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint32_t>(chunks_.size());
}

bool StoredFrame::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

const std::string& StoredFrame::chunk(uint32_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_.at(index);
}

bool StoredFrame::WhenAvailable(uint32_t index, std::function<void()> ready) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (index < chunks_.size() || broken_) return true;
  waiters_.emplace_back(index, std::move(ready));
  return false;
}

void StoredFrame::AddChunk(std::string data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_ || chunks_.size() >= chunk_count()) return;
    chunks_.push_back(std::move(data));
  }
  WakeWaiters();
}

void StoredFrame::BreakOff() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (chunks_.size() >= chunk_count()) return;
    broken_ = true;
  }
  WakeWaiters();
}

void StoredFrame::WakeWaiters() const {
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (broken_ || it->first < chunks_.size()) {
        ready.push_back(std::move(it->second));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& call : ready) call();
}

}  // namespace strait::gateway
