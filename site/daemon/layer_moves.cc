#include "site/daemon/layer_moves.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"
#include "core/status.h"
#include "plan/split_planner.h"
#include "site/exchange/frame_codec.h"
#include "site/nn/checkpoint_layers.h"
#include "site/nn/stage.h"

namespace strait::site {
namespace {

constexpr char kPurpose[] = "move";

// The byte budget of a move key's sealer (LinkSecurity::Derive's rotate_bytes): none. Move keys are
// derived afresh for every move (purpose "move", the rollback generation) and each seals a single
// frame, one part of this site's layers for one peer, so no volume of sealed bytes ever calls for
// a new key; the budget is set beyond any frame.
constexpr uint64_t kMoveKeyNoByteBudget = std::numeric_limits<uint64_t>::max();

// "[a, b)"
std::string Range(LayerRange r) { return plan::SplitToString({r}); }

LayerRange Overlap(LayerRange a, LayerRange b) {
  const LayerRange r{std::max(a.start, b.start), std::min(a.end, b.end)};
  return r.start < r.end ? r : LayerRange{0, 0};
}

v1::TensorKey MoveKey(const LayerMoves& m, int from, int to) {
  v1::TensorKey key;
  key.set_job(m.spec->name);
  key.set_step(static_cast<uint64_t>(m.step));
  key.set_boundary(static_cast<uint32_t>(from));
  key.set_microbatch(static_cast<uint32_t>(to));
  key.set_direction(v1::FORWARD);
  key.set_generation(m.generation);
  key.set_purpose(v1::MOVE);
  return key;
}

bool AnyLinkSealed(const JobSpec& spec) {
  return std::any_of(spec.links.begin(), spec.links.end(),
                     [](const LinkSpec& l) { return l.encryption; });
}

// The checkpoint this site trained to the move's step, and the layers it holds.
struct Source {
  std::string path;
  CheckpointState state;
  LayerRange held;
};

// What this site sent: the pushes in flight, the opener of each peer's part (by stage; null for
// this one) and how many layers went out.
struct Sent {
  std::vector<std::future<absl::Status>> pushes;
  std::vector<std::unique_ptr<FrameDecoder>> decoders;
  int64_t layers = 0;
};

// Phase 1: the checkpoint of m.step this site trained, checked to be one of this job's model.
absl::StatusOr<Source> ReadSource(const LayerMoves& m, const CheckpointStore& store) {
  const JobSpec& spec = *m.spec;
  Source source{.path = TrainedCheckpointPath(store, m.step)};
  STRAIT_ASSIGN_OR_RETURN(source.state, ReadCheckpoint(source.path, &store.env()));
  const CheckpointState& s = source.state;
  if (s.step != m.step || s.params.empty() ||
      s.fingerprint != StageFingerprint(spec.model, {s.first_layer, s.end_layer})) {
    return absl::FailedPreconditionError(
        absl::StrCat(source.path, " is not a checkpoint of step ", m.step, " of this job's model"));
  }
  source.held = {s.first_layer, s.end_layer};
  return source;
}

// The keys of the move between this site and `peer` (none when the job seals no link).
absl::StatusOr<LinkSecurity::LinkCrypto> MoveCrypto(const LayerMoves& m, const std::string& peer) {
  LinkSecurity::LinkCrypto crypto;
  if (m.security == nullptr || !AnyLinkSealed(*m.spec)) return crypto;
  auto key = m.keys->find(peer);
  if (key == m.keys->end()) {
    return absl::FailedPreconditionError(absl::StrCat("no key of site ", peer, " to move layers"));
  }
  return m.security->Derive(peer, key->second, kMoveKeyNoByteBudget, m.generation, kPurpose);
}

// Pushes to stage `to` the part of `source` it trains from now on (two zeros when none), sealed by
// `sealer`; adds the layers sent to `sent`.
absl::Status SendPart(const LayerMoves& m, const Source& source, int to,
                      std::unique_ptr<crypto::Sealer> sealer, Sent& sent) {
  const JobSpec& spec = *m.spec;
  const LayerRange part = Overlap(source.held, m.view->Layers(to));
  std::optional<CheckpointState> cut;
  if (part.start < part.end) {
    STRAIT_ASSIGN_OR_RETURN(cut, CutLayers(source.state, spec.model, part));
    sent.layers += part.end - part.start;
    spdlog::info("moving layers {} to {} (checkpoint of step {})", Range(part),
                 m.view->SiteId(spec, to), m.step);
  }
  const std::vector<float> payload = LayerPartToFloats(cut ? &*cut : nullptr);
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(sealer)));
  STRAIT_ASSIGN_OR_RETURN(
      FrameEncoder::Frame frame,
      encoder->Encode(MoveKey(m, m.index, to), payload, {static_cast<int64_t>(payload.size())}));
  sent.pushes.push_back(m.link->Push(std::move(frame.header), std::move(frame.body)));
  return absl::OkStatus();
}

// Phase 2: every part this site holds for another goes out first, so that no two sites wait on
// each other; keeps each peer's opener for phase 3.
absl::StatusOr<Sent> SendParts(const LayerMoves& m, const Source& source) {
  const JobSpec& spec = *m.spec;
  const int stages = static_cast<int>(spec.sites.size());
  Sent sent;
  sent.decoders.resize(stages);
  for (int to = 0; to < stages; ++to) {
    if (to == m.index) continue;
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto crypto,
                            MoveCrypto(m, m.view->SiteId(spec, to)));
    sent.decoders[to] =
        FrameDecoder::Lossless(std::move(crypto.opener), MaxMoveFloats(spec) * sizeof(float));
    STRAIT_RETURN_IF_ERROR(SendPart(m, source, to, std::move(crypto.sealer), sent));
  }
  return sent;
}

// The frame of `key` from `peer`, asked for a second at a time so that the end of the generation
// ends the wait; m.timeout on `env`'s clock.
absl::StatusOr<ReceivedFrame> AwaitPart(const LayerMoves& m, const v1::TensorKey& key,
                                        const std::string& peer, Env& env) {
  absl::StatusOr<ReceivedFrame> frame = absl::DeadlineExceededError("not asked yet");
  const Env::Clock::time_point deadline = env.Now() + m.timeout;
  while (frame.status().code() == absl::StatusCode::kDeadlineExceeded && env.Now() < deadline) {
    if (m.interrupted()) return absl::AbortedError("moving layers: the generation ended");
    frame = m.link->Pull(key, std::chrono::seconds(1)).get();
  }
  if (!frame.ok()) {
    return absl::Status(frame.status().code(), absl::StrCat("moving layers: no part from site ",
                                                            peer, ": ", frame.status().message()));
  }
  return frame;
}

// Phase 3: this site's own part of its new layers, then what each other site sent it, opened,
// checked and acknowledged.
absl::StatusOr<std::vector<CheckpointState>> ReceiveParts(const LayerMoves& m, const Source& source,
                                                          const Sent& sent, Env& env) {
  const JobSpec& spec = *m.spec;
  std::vector<CheckpointState> parts;
  const LayerRange own = Overlap(source.held, m.view->Layers(m.index));
  if (own.start < own.end) {
    STRAIT_ASSIGN_OR_RETURN(CheckpointState cut, CutLayers(source.state, spec.model, own));
    parts.push_back(std::move(cut));
  }
  for (int from = 0; from < static_cast<int>(spec.sites.size()); ++from) {
    if (from == m.index) continue;
    const std::string& peer = m.view->SiteId(spec, from);
    const v1::TensorKey key = MoveKey(m, from, m.index);
    STRAIT_ASSIGN_OR_RETURN(ReceivedFrame frame, AwaitPart(m, key, peer, env));
    absl::StatusOr<std::vector<float>> payload =
        sent.decoders[from]->Decode(key, {}, std::move(frame));
    absl::StatusOr<std::optional<CheckpointState>> part =
        payload.ok() ? LayerPartFromFloats(*payload, source.state, spec.model)
                     : absl::StatusOr<std::optional<CheckpointState>>(payload.status());
    if (!part.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("moving layers: the part from site ", peer,
                                                     " is refused: ", part.status().message()));
    }
    m.link->Ack(key);
    if (*part) {
      spdlog::info("received layers {} from {}", Range({(*part)->first_layer, (*part)->end_layer}),
                   peer);
      parts.push_back(**std::move(part));
    }
  }
  return parts;
}

// Phase 4: every push of phase 2 held by the gateway.
absl::Status AwaitPushes(std::vector<std::future<absl::Status>>& pushes) {
  for (std::future<absl::Status>& push : pushes) {
    if (absl::Status s = push.get(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("moving layers: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// Phase 5: the parts joined into the checkpoint of exactly this site's new layers.
absl::StatusOr<CheckpointState> JoinMine(const LayerMoves& m, std::vector<CheckpointState> parts) {
  const LayerRange mine = m.view->Layers(m.index);
  std::sort(parts.begin(), parts.end(), [](const CheckpointState& a, const CheckpointState& b) {
    return a.first_layer < b.first_layer;
  });
  absl::StatusOr<CheckpointState> joined =
      parts.empty() ? absl::FailedPreconditionError("no site holds any of them")
                    : JoinLayers(parts, m.spec->model);
  if (!joined.ok() || joined->first_layer != mine.start || joined->end_layer != mine.end) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoints of step ", m.step, " do not hold this site's layers ", Range(mine), ": ",
        joined.ok() ? absl::StrCat("they give ", Range({joined->first_layer, joined->end_layer}))
                    : std::string(joined.status().message())));
  }
  return joined;
}

// Phase 6: the joined checkpoint takes the place of the step's file; the trained one stays as
// .moved (when it was not already). Nothing is written when nothing moved here.
absl::Status Install(const LayerMoves& m, const CheckpointStore& store, const Source& source,
                     const CheckpointState& joined, int64_t sent_layers) {
  const LayerRange mine = m.view->Layers(m.index);
  const std::string path = store.PathFor(m.step);
  if (source.held == mine && source.path == path) return absl::OkStatus();  // Nothing moved here.
  if (source.path == path) {
    if (absl::Status kept = store.env().RenameFile(path, path + ".moved"); !kept.ok()) {
      return absl::Status(kept.code(), absl::StrCat("cannot keep ", path, " as ", path,
                                                    ".moved: ", kept.message()));
    }
  }
  STRAIT_RETURN_IF_ERROR(WriteCheckpoint(path, joined, &store.env()));
  spdlog::info("checkpoint of step {} now holds layers {} (sent {} layer(s), trained from {})",
               m.step, Range(mine), sent_layers, source.path);
  return absl::OkStatus();
}

}  // namespace

std::string TrainedCheckpointPath(const CheckpointStore& store, int64_t step) {
  const std::string moved = store.PathFor(step) + ".moved";
  return store.env().FileExists(moved) ? moved : store.PathFor(step);
}

absl::Status MoveLayers(const LayerMoves& m, const CheckpointStore& store) {
  STRAIT_ASSIGN_OR_RETURN(const Source source, ReadSource(m, store));
  STRAIT_ASSIGN_OR_RETURN(Sent sent, SendParts(m, source));
  STRAIT_ASSIGN_OR_RETURN(std::vector<CheckpointState> parts,
                          ReceiveParts(m, source, sent, store.env()));
  STRAIT_RETURN_IF_ERROR(AwaitPushes(sent.pushes));
  STRAIT_ASSIGN_OR_RETURN(const CheckpointState joined, JoinMine(m, std::move(parts)));
  return Install(m, store, source, joined, sent.layers);
}

}  // namespace strait::site
