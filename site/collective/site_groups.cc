#include "site/collective/site_groups.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

void GlooTensorReducer::AllReduceSum(Backend& backend, TypedPtr data, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!status_.ok()) return;  // The ranks are out of step: every later sum would be wrong.
  if (data.is_f32()) {
    status_ = backend.Sync();  // The partial result must be complete in host memory.
    if (status_.ok()) status_ = group_->AllReduceSum(data.f32(), count, tag_++);
    return;
  }
  // A narrower type is summed in f32 and rounded once.
  std::vector<float> sum(count);
  backend.Convert(count, data, sum.data());
  status_ = backend.Sync();
  if (status_.ok()) status_ = group_->AllReduceSum(sum.data(), count, tag_++);
  backend.Convert(count, sum.data(), data);
  if (status_.ok()) status_ = backend.Sync();
}

absl::Status GlooTensorReducer::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

absl::StatusOr<SiteGroups> ConnectSiteGroups(RendezvousStore& store, const std::string& prefix,
                                             SiteRank place, const std::string& host,
                                             std::chrono::milliseconds timeout) {
  const int rank = place.rank, machines = place.machines, tensor_parallel = place.tensor_parallel;
  SiteGroups groups;
  const int replicas = machines / tensor_parallel;
  const int tp = rank % tensor_parallel, dp = rank / tensor_parallel;
  if (tensor_parallel > 1) {
    STRAIT_ASSIGN_OR_RETURN(
        groups.tensor, GlooGroup::Connect(store, {.rank = tp,
                                                  .size = tensor_parallel,
                                                  .prefix = absl::StrCat(prefix, "tp", dp, "/"),
                                                  .host = host,
                                                  .timeout = timeout}));
    groups.reducer = std::make_unique<GlooTensorReducer>(groups.tensor.get());
  }
  if (replicas > 1) {
    STRAIT_ASSIGN_OR_RETURN(
        groups.data, GlooGroup::Connect(store, {.rank = dp,
                                                .size = replicas,
                                                .prefix = absl::StrCat(prefix, "dp", tp, "/"),
                                                .host = host,
                                                .timeout = timeout}));
  }
  return groups;
}

}  // namespace strait::site
