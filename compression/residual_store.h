// Error-feedback state: the residual each tensor key left behind (what topk:ef did not send), added
// to the next tensor of the same key so that nothing is lost over time.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strait::compression {

// Not thread-safe: one store per encoding thread, or guard it. Keys are the caller's (for example
// "boundary 1 backward"); they must stay the same across steps for feedback to work.
class ResidualStore {
 public:
  // The residual of `key`, created as `size` zeros on first use. The span stays valid until the key
  // is erased or the store destroyed. Error when the key was used with another size.
  absl::StatusOr<absl::Span<float>> Get(absl::string_view key, size_t size);

  // Forgets `key` (e.g. after a rollback to a checkpoint). No-op when absent.
  void Erase(absl::string_view key);

  size_t key_count() const { return residuals_.size(); }

 private:
  absl::flat_hash_map<std::string, std::vector<float>> residuals_;
};

}  // namespace strait::compression
