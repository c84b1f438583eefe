// Helpers for the routing key of every tensor on the wire (DESIGN.md §4, proto TensorKey).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "core/job_spec.h"
#include "strait/v1/tensor.pb.h"

namespace strait {

// Stage (site index) that produces the key in a job of `stages` stages: `boundary` for FORWARD,
// `boundary + 1` for BACKWARD; for TIED keys the first stage (FORWARD) or the last (BACKWARD); for
// MOVE keys `boundary`.
int ProducerStage(const v1::TensorKey& key, int stages);
// Stage that consumes the key: the other end of the boundary (TIED: of the first-last link; MOVE:
// `microbatch`).
int ConsumerStage(const v1::TensorKey& key, int stages);

// The member slot (JobSpec::MemberSlots) of the site that produces / consumes the key: its stage in
// pipeline key.replica(); for a TEACH key a teacher stage's, or the student's last stage as the
// teacher's targets' consumer (FORWARD), and for a TEACH BACKWARD key (the teacher's pace, from the
// student's last stage to the teacher's first stage: core/teach_links.h) those two; for a SERVE
// key the stages it joins, -1 for the gateway's end of the client's prompt and tokens; -1 for the
// gateway's end of a SUM key (the sum's producer, the masked vector's consumer). Call on a key that
// passed ValidateTensorKey.
int ProducerSlot(const v1::TensorKey& key, const JobSpec& spec);
int ConsumerSlot(const v1::TensorKey& key, const JobSpec& spec);

// Checks a key received from the network against the job: job name, a real boundary, a direction, a
// microbatch below the job's count. The message says which field is wrong.
absl::Status ValidateTensorKey(const v1::TensorKey& key, const JobSpec& spec);

// Compact text for logs and errors: "fashion/s12/m3/b1/fwd/g0" (with "/r1" for replica 1).
std::string TensorKeyToString(const v1::TensorKey& key);

}  // namespace strait
