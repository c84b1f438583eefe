#include "site/data/token_windows.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

TokenWindows::TokenWindows(std::shared_ptr<const MappedTokenShards> shards, int64_t begin,
                           int64_t windows, int context)
    : shards_(std::move(shards)), begin_(begin), windows_(windows), context_(context) {}

absl::Status TokenWindows::Read(int64_t window, float* inputs, int32_t* labels) const {
  if (window < 0 || window >= windows_) {
    return absl::OutOfRangeError(
        absl::StrCat("window ", window, " is not in the split's [0, ", windows_, ")"));
  }
  std::vector<int32_t> tokens(static_cast<size_t>(context_) + 1);
  STRAIT_RETURN_IF_ERROR(shards_->Read(begin_ + window * context_, context_ + 1, tokens.data()));
  for (int i = 0; i < context_; ++i) {
    if (inputs != nullptr) inputs[i] = static_cast<float>(tokens[i]);
    if (labels != nullptr) labels[i] = tokens[i + 1];
  }
  return absl::OkStatus();
}

}  // namespace strait::site
