#include "compression/residual_store.h"

#include "absl/strings/str_cat.h"

namespace strait::compression {

absl::StatusOr<absl::Span<float>> ResidualStore::Get(absl::string_view key, size_t size) {
  auto it = residuals_.find(key);
  if (it == residuals_.end()) {
    it = residuals_.emplace(std::string(key), std::vector<float>(size, 0.0f)).first;
  } else if (it->second.size() != size) {
    return absl::InvalidArgumentError(absl::StrCat("error-feedback key '", key, "' holds ",
                                                   it->second.size(), " values, the tensor has ",
                                                   size));
  }
  return absl::MakeSpan(it->second);
}

void ResidualStore::Erase(absl::string_view key) {
  auto it = residuals_.find(key);
  if (it != residuals_.end()) residuals_.erase(it);
}

}  // namespace strait::compression
