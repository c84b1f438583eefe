// CreateNcclAllReducer in a build without CUDA (nccl_all_reducer.cc is the real one).
#include "site/collective/all_reducer.h"

namespace strait::site {

namespace {
constexpr char kNoCuda[] =
    "NCCL all-reduce requested, but this build has no CUDA support (-DSTRAIT_CUDA=ON)";
}

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(const std::vector<Backend*>&,
                                                                 const std::vector<int>&,
                                                                 std::vector<float*>,
                                                                 std::vector<Bucket>,
                                                                 const NcclClique*) {
  return absl::FailedPreconditionError(kNoCuda);
}

absl::StatusOr<std::string> NewNcclUniqueId() { return absl::FailedPreconditionError(kNoCuda); }

}  // namespace strait::site
