// Layers that change owner at a rollback of a planned split (`layers: auto`; proto Rollback.split,
// Purpose MOVE). Every stage sends every other stage, through the gateway, the part of its
// checkpoint of the rollback's step that the other trains from now on (two zeros when none), sealed
// with keys only the two sites hold. Each then joins its own part and what it received into its
// checkpoint of that step for its new layers (site/nn/checkpoint_layers.h): parameters, every
// weight version and the optimizer state, bit for bit, so the run goes on as one machine's would.
//
// The checkpoint a site trained to that step stays as <step file>.moved when the joined one takes
// its place, and is the source of every later move at the same step: a rollback that repeats after
// a failure in the middle of the moves finds every part where it was.
//
// Files and time (the wait for each part) come from the store's Env (core/env.h), so moves are
// unit-tested in memory on a clock that moves when told.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "site/daemon/checkpoint_store.h"
#include "site/exchange/gateway_link.h"
#include "site/exchange/link_security.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

struct LayerMoves {
  const JobSpec* spec = nullptr;
  const JobView* view = nullptr;  // The split of the generation that starts; this site's replica.
  int index = 0;                  // This stage.
  int64_t step = 0;               // The rollback's (> 0).
  uint32_t generation = 0;
  GatewayLink* link = nullptr;
  const LinkSecurity* security = nullptr;                      // Null: the job seals no link.
  const std::map<std::string, v1::SignedKey>* keys = nullptr;  // Every other site's.
  // For each part to arrive, on the store's Env clock.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // True once the generation is over (a Pause or a newer Rollback): the wait for parts ends.
  std::function<bool()> interrupted = [] { return false; };
};

// The path of the checkpoint that `store`'s site trained to `step` (the .moved one if a move
// replaced it).
std::string TrainedCheckpointPath(const CheckpointStore& store, int64_t step);

// Sends and receives the parts and writes this site's checkpoint of `m.step` for its layers in
// `m.view` (in phases: read the trained checkpoint, send, receive, await the pushes, join,
// install). Blocks on the link and on `store`'s Env. Logs what moved. An error names the part or
// site that failed; ABORTED when m.interrupted() said so while a part was awaited.
absl::Status MoveLayers(const LayerMoves& m, const CheckpointStore& store);

}  // namespace strait::site
