// The two-site job that `strait bench relay` and `strait bench stream` move frames for: boundary 0
// carries up to 16 MiB per microbatch, and frame i gets a key of its own.
#pragma once

#include <cstdint>
#include <string>

#include "strait/v1/gateway.pb.h"

namespace strait::bench {

inline constexpr char kRelayFederation[] = "relay-bench";

// The job spec (YAML): sites "a" (producer of boundary 0) and "b" (its consumer).
extern const char kRelayJobSpec[];

// A distinct forward key of boundary 0 for the i-th frame.
v1::TensorKey RelayFrameKey(uint64_t i);

// What site `id` ("a" or "b") sends to join with epoch 1.
v1::JoinRequest RelayJoin(const std::string& id);

}  // namespace strait::bench
