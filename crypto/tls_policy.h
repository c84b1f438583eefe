// The TLS versions this project speaks (DESIGN.md §5): TLS 1.3 only, on the gateway's server side
// and on each site's client side alike, so that neither end depends on the other to refuse TLS 1.2.
#pragma once

#include "absl/status/status.h"

namespace strait::crypto {

// Makes every TLS context this process creates from now on refuse TLS 1.2 and older, whatever
// minimum version the context's creator sets afterwards. Contexts created before the first call are
// not changed. Idempotent and thread-safe; an error names the OpenSSL call that failed.
absl::Status RequireTls13ForNewContexts();

}  // namespace strait::crypto
