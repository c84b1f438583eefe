#include "gateway/rpc/revocation_list.h"

#include <utility>

namespace strait::gateway {

RevocationList::RevocationList(crypto::DenyList list)
    : list_(std::make_shared<const crypto::DenyList>(std::move(list))) {}

void RevocationList::Replace(crypto::DenyList list) {
  auto next = std::make_shared<const crypto::DenyList>(std::move(list));
  std::lock_guard<std::mutex> lock(mu_);
  list_ = std::move(next);
}

std::shared_ptr<const crypto::DenyList> RevocationList::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_;
}

}  // namespace strait::gateway
