// The deny list the gateway enforces (tls.deny_list, docs/security.md), replaceable while it
// serves. Free of gRPC, so that the daemon can reload it without seeing the rpc layer's types.
#pragma once

#include <memory>
#include <mutex>

#include "crypto/deny_list.h"

namespace strait::gateway {

// Thread-safe; Current() returns a snapshot that stays valid while the caller holds it.
class RevocationList {
 public:
  explicit RevocationList(crypto::DenyList list = {});
  void Replace(crypto::DenyList list);
  std::shared_ptr<const crypto::DenyList> Current() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const crypto::DenyList> list_;  // Guarded by mu_.
};

}  // namespace strait::gateway
