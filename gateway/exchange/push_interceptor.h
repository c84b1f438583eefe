// A seam for fault-injection tests (DESIGN.md §9: test hooks live in test code): an interceptor
// given to GatewayCore sees, and may change, the first chunk of every push before the gateway
// checks it. Production gateways install none; tests build their own gateway executable with one
// (see strait_add_executable in tests/integration/CMakeLists.txt).
#pragma once

#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class PushInterceptor {
 public:
  virtual ~PushInterceptor() = default;
  // Called with chunk 0 of every transfer a site pushes (the chunk carrying the frame's header),
  // before it is checked or stored. Called from every stream's thread at once: must be
  // thread-safe, quick and non-blocking.
  virtual void OnFirstChunk(v1::PushChunk& chunk) = 0;
};

}  // namespace strait::gateway
