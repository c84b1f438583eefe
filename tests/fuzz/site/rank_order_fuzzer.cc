// A follower rank takes orders from its leader over an authenticated link, but handles them like
// any bytes from the network: whatever the calls and their sizes, in whatever order, the rank's
// stage answers with an error or a result and never crashes or reads out of bounds. Input: a
// sequence of u16 length | RankCallOrder (protobuf), each decoded (FromOrder) and served by rank 1
// of a two-rank site (a small MLP); then the rest as a RankAnswer for the leader's decoder.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "site/daemon/rank_messages.h"
#include "site/pipeline/follower_stage.h"

namespace {

strait::ModelSpec Mlp() {
  strait::ModelSpec m;
  m.family = strait::ModelFamily::kMlp;
  m.mlp.input = 6;
  m.mlp.hidden = {8, 4};
  m.mlp.classes = 3;
  m.mlp.dropout = 0.1f;
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto stage =
      strait::site::FollowerStage::Create(Mlp(), {0, 3}, {}, 4, {2, 0.0f}, {.rank = 1, .ranks = 2});
  if (!stage.ok()) __builtin_trap();
  size_t at = 0;
  for (int calls = 0; at + 2 <= size && calls < 64; ++calls) {
    const size_t length = data[at] | size_t{data[at + 1]} << 8;
    at += 2;
    if (at + length > size) break;
    strait::v1::RankCallOrder order;
    if (order.ParseFromArray(data + at, static_cast<int>(length))) {
      absl::StatusOr<strait::site::RankCall> call = strait::site::FromOrder(order);
      if (call.ok()) (void)strait::site::ToAnswer((*stage)->Serve(*call));
    }
    at += length;
  }
  strait::v1::RankAnswer answer;
  if (answer.ParseFromArray(data + at, static_cast<int>(size - at))) {
    (void)strait::site::FromAnswer(answer);
  }
  return 0;
}
