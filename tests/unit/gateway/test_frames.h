// Small builders of job specs, keys and frames for the gateway's unit tests.
#pragma once

#include <memory>
#include <string>

#include "core/job_spec.h"
#include "gateway/mailbox/stored_frame.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway::testing {

// Three sites a, b, c; 4 microbatches.
JobSpec ThreeSiteSpec();
v1::TensorKey Key(uint64_t step, uint32_t microbatch, uint32_t boundary, v1::Direction direction,
                  uint32_t generation = 0);
// A valid header for a [2, 3] float tensor whose body has `wire_bytes` bytes in `chunks` chunks.
v1::FrameHeader Header(const v1::TensorKey& key, uint64_t wire_bytes, uint32_t chunks = 1);
FramePtr Frame(const v1::TensorKey& key, uint64_t wire_bytes);
// A frame of `chunks` chunks of 10 bytes each, none of which has arrived yet.
std::shared_ptr<StoredFrame> ArrivingFrame(const v1::TensorKey& key, uint32_t chunks);

}  // namespace strait::gateway::testing
