#include "site/daemon/layer_moves.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
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

}  // namespace

std::string TrainedCheckpointPath(const CheckpointStore& store, int64_t step) {
  const std::string moved = store.PathFor(step) + ".moved";
  return std::filesystem::exists(moved) ? moved : store.PathFor(step);
}

absl::Status MoveLayers(const LayerMoves& m, const CheckpointStore& store) {
  const JobSpec& spec = *m.spec;
  const int stages = static_cast<int>(spec.sites.size());
  const std::string source_path = TrainedCheckpointPath(store, m.step);
  STRAIT_ASSIGN_OR_RETURN(const CheckpointState source, ReadCheckpoint(source_path));
  if (source.step != m.step || source.params.empty() ||
      source.fingerprint != StageFingerprint(spec.model, {source.first_layer, source.end_layer})) {
    return absl::FailedPreconditionError(
        absl::StrCat(source_path, " is not a checkpoint of step ", m.step, " of this job's model"));
  }
  const LayerRange held{source.first_layer, source.end_layer};
  const LayerRange mine = spec.sites[m.index].layers;
  const bool sealed = m.security != nullptr && AnyLinkSealed(spec);

  // Every part this site holds for another goes out first, so that no two sites wait on each other.
  std::vector<std::future<absl::Status>> pushes;
  std::vector<std::unique_ptr<FrameDecoder>> decoders(stages);
  int64_t sent_layers = 0;
  for (int to = 0; to < stages; ++to) {
    if (to == m.index) continue;
    const std::string& peer = spec.sites[to].id;
    LinkSecurity::LinkCrypto crypto;
    if (sealed) {
      auto key = m.keys->find(peer);
      if (key == m.keys->end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("no key of site ", peer, " to move layers"));
      }
      STRAIT_ASSIGN_OR_RETURN(crypto, m.security->Derive(peer, key->second, kMoveKeyNoByteBudget,
                                                         m.generation, kPurpose));
    }
    decoders[to] = std::make_unique<FrameDecoder>(std::move(crypto.opener),
                                                  MaxMoveFloats(spec) * sizeof(float));
    const LayerRange part = Overlap(held, spec.sites[to].layers);
    std::optional<CheckpointState> cut;
    if (part.start < part.end) {
      STRAIT_ASSIGN_OR_RETURN(cut, CutLayers(source, spec.model, part));
      sent_layers += part.end - part.start;
      spdlog::info("moving layers {} to {} (checkpoint of step {})", Range(part), peer, m.step);
    }
    const std::vector<float> payload = LayerPartToFloats(cut ? &*cut : nullptr);
    STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(crypto.sealer)));
    STRAIT_ASSIGN_OR_RETURN(
        FrameEncoder::Frame frame,
        encoder->Encode(MoveKey(m, m.index, to), payload, {static_cast<int64_t>(payload.size())}));
    pushes.push_back(m.link->Push(std::move(frame.header), std::move(frame.body)));
  }

  std::vector<CheckpointState> parts;
  const LayerRange own = Overlap(held, mine);
  if (own.start < own.end) {
    STRAIT_ASSIGN_OR_RETURN(CheckpointState cut, CutLayers(source, spec.model, own));
    parts.push_back(std::move(cut));
  }
  for (int from = 0; from < stages; ++from) {
    if (from == m.index) continue;
    const std::string& peer = spec.sites[from].id;
    const v1::TensorKey key = MoveKey(m, from, m.index);
    // Asked for a second at a time, so that the end of the generation ends the wait.
    absl::StatusOr<ReceivedFrame> frame = absl::DeadlineExceededError("not asked yet");
    const auto deadline = std::chrono::steady_clock::now() + m.timeout;
    while (frame.status().code() == absl::StatusCode::kDeadlineExceeded &&
           std::chrono::steady_clock::now() < deadline) {
      if (m.interrupted()) return absl::AbortedError("moving layers: the generation ended");
      frame = m.link->Pull(key, std::chrono::seconds(1)).get();
    }
    if (!frame.ok()) {
      return absl::Status(
          frame.status().code(),
          absl::StrCat("moving layers: no part from site ", peer, ": ", frame.status().message()));
    }
    absl::StatusOr<std::vector<float>> payload = decoders[from]->Decode(key, {}, *std::move(frame));
    absl::StatusOr<std::optional<CheckpointState>> part =
        payload.ok() ? LayerPartFromFloats(*payload, source, spec.model)
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
  for (std::future<absl::Status>& push : pushes) {
    if (absl::Status s = push.get(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("moving layers: ", s.message()));
    }
  }
  std::sort(parts.begin(), parts.end(), [](const CheckpointState& a, const CheckpointState& b) {
    return a.first_layer < b.first_layer;
  });
  absl::StatusOr<CheckpointState> joined =
      parts.empty() ? absl::FailedPreconditionError("no site holds any of them")
                    : JoinLayers(parts, spec.model);
  if (!joined.ok() || joined->first_layer != mine.start || joined->end_layer != mine.end) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoints of step ", m.step, " do not hold this site's layers ", Range(mine), ": ",
        joined.ok() ? absl::StrCat("they give ", Range({joined->first_layer, joined->end_layer}))
                    : std::string(joined.status().message())));
  }
  const std::string path = store.PathFor(m.step);
  if (held == mine && source_path == path) return absl::OkStatus();  // Nothing moved here.
  if (source_path == path) {
    std::error_code error;
    std::filesystem::rename(path, path + ".moved", error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("cannot keep ", path, " as ", path, ".moved: ", error.message()));
    }
  }
  STRAIT_RETURN_IF_ERROR(WriteCheckpoint(path, *joined));
  spdlog::info("checkpoint of step {} now holds layers {} (sent {} layer(s), trained from {})",
               m.step, Range(mine), sent_layers, source_path);
  return absl::OkStatus();
}

}  // namespace strait::site
