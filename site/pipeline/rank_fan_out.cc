#include "site/pipeline/rank_fan_out.h"

#include <vector>

namespace strait::site {

absl::Status RankFanOut::Run(const std::function<RankCall(int rank)>& make,
                             const std::function<absl::Status()>& local,
                             const std::function<absl::Status(int rank, RankResult&)>& take) const {
  const int ranks = peers_.ranks();
  absl::Status status;
  std::vector<bool> sent(ranks, false);
  for (int r = 1; r < ranks; ++r) {
    absl::Status s = peers_.Send(r, make(r));
    sent[r] = s.ok();
    status.Update(s);
  }
  if (status.ok()) status.Update(local());
  for (int r = 1; r < ranks; ++r) {
    if (!sent[r]) continue;
    absl::StatusOr<RankResult> result = peers_.Await(r);
    if (!result.ok()) {
      status.Update(result.status());
    } else if (take && status.ok()) {
      status.Update(take(r, *result));
    }
  }
  return status;
}

}  // namespace strait::site
