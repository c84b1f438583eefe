// RankCall / RankResult (site/pipeline/rank_call.h) as the messages of the leader's link to its
// followers (proto/strait/v1/site_ranks.proto). Decoding checks what it reads: the link is
// authenticated, but its bytes are handled like any other input from the network.
#pragma once

#include <chrono>

#include "absl/status/statusor.h"
#include "site/pipeline/rank_call.h"
#include "strait/v1/site_ranks.pb.h"

namespace strait::site {

v1::RankCallOrder ToOrder(const RankCall& call);
// InvalidArgument for an unknown op or a byte string that is not whole floats.
absl::StatusOr<RankCall> FromOrder(const v1::RankCallOrder& order);

// The rendezvous and collective timeout of a site's group (RankGroupOrder.timeout_s): the leader
// sends its heartbeat timeout (gateway.heartbeat_timeout), at least kMinGroupTimeoutS.
inline constexpr double kMinGroupTimeoutS = 1;
inline constexpr double kMaxGroupTimeoutS = 3600;
// `timeout_s` as a duration; INVALID_ARGUMENT naming it when it is not a number of seconds from
// kMinGroupTimeoutS to kMaxGroupTimeoutS (NaN and infinities included).
absl::StatusOr<std::chrono::milliseconds> GroupTimeout(double timeout_s);

// A result, or the error the follower met (its code and message).
v1::RankAnswer ToAnswer(const absl::StatusOr<RankResult>& result);
absl::StatusOr<RankResult> FromAnswer(const v1::RankAnswer& answer);
v1::RankAnswer StatusAnswer(const absl::Status& status);
// The error an answer carries, OK when none.
absl::Status AnswerStatus(const v1::RankAnswer& answer);

}  // namespace strait::site
