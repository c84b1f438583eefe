// The signed ephemeral keys of this site's neighbours, as the gateway hands them over (in the
// JoinReply, or later in neighbour_key control messages when a neighbour joins after us).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strait/v1/federation.pb.h"

namespace strait::site {

// Thread-safe.
class NeighbourKeys {
 public:
  // Keeps the key of the newest epoch per site (the gateway may re-send one a site already has).
  void Add(const v1::SignedKey& key);
  // Blocks until every site of `ids` has a key; DEADLINE_EXCEEDED naming the missing ones after
  // `timeout`. Calls `waiting(missing ids)` every `notice` while it waits.
  absl::StatusOr<std::map<std::string, v1::SignedKey>> WaitFor(
      const std::vector<std::string>& ids, std::chrono::seconds timeout,
      std::chrono::seconds notice, const std::function<void(const std::string&)>& waiting);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, v1::SignedKey> keys_;
};

}  // namespace strait::site
