// How a microbatch's rows are divided among a site's ranks and their workers (DESIGN.md §4). The
// one place that divides a microbatch: every executor part (local workers, the leader's mirroring,
// a follower's serving) asks here. Values; any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strait::site {

// A microbatch divided into `parts` contiguous parts as equal as they can be (the first n % parts
// one row longer), this process's workers taking parts first_part, first_part + 1, ...
// (one process: parts = W, first_part = 0).
class RowSplit {
 public:
  RowSplit(int parts, int first_part) : parts_(parts), first_part_(first_part) {}
  // Rows [first, first + count) of an n-row microbatch that local worker `worker` takes; count
  // may be 0 when n < parts.
  std::pair<int64_t, int> Rows(int n, int worker) const {
    return PartRows(n, first_part_ + worker, 1);
  }
  // The rows of parts [first_part, first_part + count), which are contiguous.
  std::pair<int64_t, int> PartRows(int n, int first_part, int count) const {
    const int base = n / parts_, extra = n % parts_;
    auto start = [&](int part) { return int64_t{part} * base + std::min(part, extra); };
    return {start(first_part), static_cast<int>(start(first_part + count) - start(first_part))};
  }
  // The most rows one part holds of a microbatch of `n` rows.
  int MaxRows(int n) const { return (n + parts_ - 1) / parts_; }

 private:
  int parts_;
  int first_part_;
};

// A site of `ranks` ranks of `workers` workers each, `tensor_parallel` consecutive ranks splitting
// the layers of one data-parallel replica: the replicas divide each microbatch into
// replicas * workers parts; every tensor rank of replica d computes the rows of parts
// d * workers .. d * workers + workers - 1.
class SiteRows {
 public:
  SiteRows(int ranks, int tensor_parallel, int workers)
      : tensor_parallel_(tensor_parallel),
        workers_(workers),
        parts_(ranks / tensor_parallel * workers) {}
  // The first of rank `rank`'s parts, and how many parts there are.
  int FirstPart(int rank) const { return rank / tensor_parallel_ * workers_; }
  int parts() const { return parts_; }
  // The split of rank `rank`'s workers.
  RowSplit ForRank(int rank) const { return RowSplit(parts_, FirstPart(rank)); }
  // The rows [first, first + count) of an n-row microbatch that rank `rank` takes.
  std::pair<int64_t, int> Rows(int n, int rank) const {
    return RowSplit(parts_, 0).PartRows(n, FirstPart(rank), workers_);
  }
  // Whether rank `rank` returns outputs: the first tensor rank of its replica (the others compute
  // the same).
  bool Answers(int rank) const { return rank % tensor_parallel_ == 0; }

 private:
  int tensor_parallel_;
  int workers_;
  int parts_;
};

// A rank's `rows` (first, count) of `features` floats each, copied out of `whole` (a whole
// microbatch).
inline std::vector<float> RowsOf(const float* whole, std::pair<int64_t, int> rows,
                                 int64_t features) {
  return std::vector<float>(whole + rows.first * features,
                            whole + (rows.first + rows.second) * features);
}

// Copies a rank's `rows` (first, count) of `features` floats each from `values` into `whole` (a
// whole microbatch); Internal when the sizes differ (`what` names the tensor).
inline absl::Status PlaceRows(const std::vector<float>& values, std::pair<int64_t, int> rows,
                              int64_t features, float* whole, const char* what) {
  const auto [first, count] = rows;
  if (static_cast<int64_t>(values.size()) != count * features) {
    return absl::InternalError(absl::StrCat("a rank sent ", values.size(), " floats of ", what,
                                            " for its ", count, " rows of ", features));
  }
  std::copy(values.begin(), values.end(), whole + first * features);
  return absl::OkStatus();
}

}  // namespace strait::site
