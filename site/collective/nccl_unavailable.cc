// CreateNcclAllReducer in a build without CUDA (nccl_all_reducer.cc is the real one).
#include "site/collective/all_reducer.h"

namespace strait::site {

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(const std::vector<Backend*>&,
                                                                 const std::vector<int>&,
                                                                 std::vector<float*>,
                                                                 std::vector<Bucket>) {
  return absl::FailedPreconditionError(
      "NCCL all-reduce requested, but this build has no CUDA support (-DSTRAIT_CUDA=ON)");
}

}  // namespace strait::site
