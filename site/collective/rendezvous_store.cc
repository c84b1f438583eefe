#include "site/collective/rendezvous_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace strait::site {

absl::Status MemoryRendezvousStore::Set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[key] = value;
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryRendezvousStore::Get(const std::string& key,
                                                       std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) != 0; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous key '", key, "' not set within ", timeout.count(), " ms"));
  }
  return values_[key];
}

void MemoryRendezvousStore::EraseWithPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && absl::StartsWith(it->first, prefix);) {
    it = values_.erase(it);
  }
}

}  // namespace strait::site
