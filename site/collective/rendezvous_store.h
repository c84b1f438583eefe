// The key-value store through which the ranks of a site find each other (DESIGN.md §4): Gloo's
// rendezvous and the NCCL unique id go through it. The leader holds the one store of its site
// (MemoryRendezvousStore); the other ranks reach it over their authenticated link to the leader
// (site/rpc/rank_client.h). Keys are written once per group and read by every rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace strait::site {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Sets `key` (overwriting). Thread-safe.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` is set or `timeout` passes (DeadlineExceeded naming the key). Thread-safe.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;
};

// A store in this process's memory: the leader's, and the ranks of one process in tests.
class MemoryRendezvousStore final : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  // Removes every key that starts with `prefix` (a group that is over).
  void EraseWithPrefix(const std::string& prefix);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
};

}  // namespace strait::site
