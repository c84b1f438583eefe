#include "site/daemon/neighbour_keys.h"

#include "absl/strings/str_cat.h"

namespace strait::site {

void NeighbourKeys::Add(const v1::SignedKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(key.site_id());
  if (it != keys_.end() && it->second.epoch() > key.epoch()) return;  // An older key, re-sent.
  keys_[key.site_id()] = key;
  cv_.notify_all();
}

absl::StatusOr<std::map<std::string, v1::SignedKey>> NeighbourKeys::WaitFor(
    const std::vector<std::string>& ids, std::chrono::seconds timeout, std::chrono::seconds notice,
    const std::function<void(const std::string&)>& waiting) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto next_notice = std::chrono::steady_clock::now() + notice;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::string missing;
    for (const std::string& id : ids) {
      if (keys_.count(id) == 0) missing += (missing.empty() ? "" : ", ") + id;
    }
    if (missing.empty()) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no key from ", missing, " after ",
                                                      timeout.count(),
                                                      " s: has that site joined the gateway?"));
    }
    if (now >= next_notice) {
      waiting(missing);
      next_notice = now + notice;
    }
    cv_.wait_until(lock, std::min(deadline, next_notice));
  }
  std::map<std::string, v1::SignedKey> out;
  for (const std::string& id : ids) out[id] = keys_[id];
  return out;
}

}  // namespace strait::site
