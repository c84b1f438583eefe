#include "site/daemon/stage_link_builder.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "compression/gradient_moments.h"
#include "compression/klt_math.h"
#include "core/schedule.h"
#include "core/status.h"
#include "core/teach_links.h"
#include "core/tied_embeddings.h"
#include "site/backend/backend_factory.h"
#include "site/exchange/teacher_targets_codec.h"

namespace strait::site {
namespace {

// Whether a link direction's chain shapes klt's noise by the link's gradients (klt:STEP:fisher).
bool UsesFisher(const std::string& chain) {
  absl::StatusOr<compression::ChainSpec> spec = compression::ParseChainSpec(chain);
  if (!spec.ok()) return false;
  for (const compression::StageSpec& stage : spec->stages) {
    if (stage.fisher) return true;
  }
  return false;
}

// The signed key of site `id`, empty when it has none (then it does not verify).
v1::SignedKey PeerKeyOf(const LinkSealing& sealing, const std::string& id) {
  if (sealing.peers == nullptr) return {};
  auto key = sealing.peers->find(id);
  return key == sealing.peers->end() ? v1::SignedKey{} : key->second;
}

// The keys of the link with site `id` for the generation, derived with `purpose` (LinkSecurity).
absl::StatusOr<LinkSecurity::LinkCrypto> DeriveWith(const LinkSealing& sealing,
                                                    const std::string& id, uint64_t rotate_bytes,
                                                    absl::string_view purpose = {}) {
  if (sealing.security == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the link with ", id, " is sealed, but this site has no signed key (it has not joined)"));
  }
  absl::StatusOr<LinkSecurity::LinkCrypto> crypto = sealing.security->Derive(
      id, PeerKeyOf(sealing, id), rotate_bytes, sealing.generation, purpose);
  if (!crypto.ok()) {
    return absl::Status(
        crypto.status().code(),
        absl::StrCat("the key of site ", id, " does not verify: ", crypto.status().message()));
  }
  return crypto;
}

// The keys of the teacher link with member `id` (core/teach_links.h): always sealed.
absl::StatusOr<LinkSecurity::LinkCrypto> TeachCryptoWith(const JobSpec& spec,
                                                         const LinkSealing& sealing,
                                                         const std::string& id) {
  return DeriveWith(sealing, id, TeachLink(spec).rotate_bytes, kTeachKeyPurpose);
}

// One stage's links of one generation, direction by direction.
class LinkBuilder {
 public:
  LinkBuilder(const JobSpec& spec, int index, GatewayLink& gateway, const LinkSealing& sealing,
              SiteMetrics& metrics, const LinkLimits& limits)
      : spec_(spec),
        index_(index),
        gateway_(gateway),
        sealing_(sealing),
        metrics_(metrics),
        limits_(limits),
        klt_math_(KltMathFor(spec.sites[index].device)) {}

  absl::StatusOr<StageLinks> Build();

 private:
  // The keys of the link with `peer` (a neighbour, or the other end of the tied link) for the
  // generation (no sealing when the link is not encrypted).
  absl::StatusOr<LinkSecurity::LinkCrypto> CryptoWith(const LinkSpec& link, int peer) const;
  // The id of the site of stage `stage` in this site's pipeline (sealing_.replica).
  const std::string& SiteId(int stage) const {
    return spec_.SiteIdAt(sealing_.replica * spec_.Stages() + stage);
  }
  // Stochastic rounding's seed for this pipeline's link direction at `boundary`: its own noise.
  uint64_t RoundingSeed(int boundary, v1::Direction direction) const {
    return compression::StreamSeed(static_cast<uint64_t>(sealing_.replica) << 32 |
                                   static_cast<uint64_t>(boundary) << 1 |
                                   (direction == v1::BACKWARD ? 1 : 0));
  }
  absl::Status AddPrevious(StageLinks& links);
  absl::Status AddNext(StageLinks& links);
  absl::Status AddTied(int peer, StageLinks& links);
  // Replicas (JobSpec::replicas): the stage's secure sums through the gateway, lossless and not
  // sealed (the gateway adds the words), masked with keys agreed with the stage's other replicas.
  absl::Status AddReplicaSums(StageLinks& links);
  // Knowledge sharing, the last stage: the teacher's targets from the teacher's last stage.
  absl::Status AddTeacherTargets(StageLinks& links);

  const JobSpec& spec_;
  const int index_;
  GatewayLink& gateway_;
  const LinkSealing& sealing_;
  SiteMetrics& metrics_;
  const LinkLimits& limits_;
  // Where the link codecs' klt stages transform: the stage's device (its worker 0's).
  const compression::KltMathFactory klt_math_;
};

absl::StatusOr<LinkSecurity::LinkCrypto> LinkBuilder::CryptoWith(const LinkSpec& link,
                                                                 int peer) const {
  if (!link.encryption) return LinkSecurity::LinkCrypto{};
  return DeriveWith(sealing_, SiteId(peer), link.rotate_bytes);
}

absl::Status LinkBuilder::AddPrevious(StageLinks& links) {
  const int peer = index_ - 1;
  const LinkSpec& link = spec_.links[peer];
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, CryptoWith(link, peer));
  STRAIT_ASSIGN_OR_RETURN(
      auto encoder, FrameEncoder::Create(link.backward, std::move(c.sealer),
                                         RoundingSeed(peer, v1::BACKWARD), nullptr, klt_math_));
  STRAIT_ASSIGN_OR_RETURN(links.backward_out,
                          FrameSender::Create(gateway_, std::move(encoder), peer, v1::BACKWARD,
                                              metrics_, limits_.window));
  STRAIT_ASSIGN_OR_RETURN(auto decoder,
                          FrameDecoder::ForChains(std::move(c.opener), limits_.max_raw,
                                                  {link.forward, "none"}, nullptr, klt_math_));
  STRAIT_ASSIGN_OR_RETURN(links.forward_in, FrameReceiver::Create(gateway_, std::move(decoder),
                                                                  {SiteId(peer), peer, v1::FORWARD},
                                                                  metrics_, limits_.window));
  return absl::OkStatus();
}

absl::Status LinkBuilder::AddNext(StageLinks& links) {
  const int peer = index_ + 1;
  const LinkSpec& link = spec_.links[index_];
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, CryptoWith(link, peer));
  // klt:fisher forward: the encoder learns from the gradients this link's backward brings.
  std::shared_ptr<compression::GradientMoments> gradients;
  if (UsesFisher(link.forward)) gradients = std::make_shared<compression::GradientMoments>();
  STRAIT_ASSIGN_OR_RETURN(
      auto encoder, FrameEncoder::Create(link.forward, std::move(c.sealer),
                                         RoundingSeed(index_, v1::FORWARD), gradients, klt_math_));
  STRAIT_ASSIGN_OR_RETURN(links.forward_out,
                          FrameSender::Create(gateway_, std::move(encoder), index_, v1::FORWARD,
                                              metrics_, limits_.window));
  STRAIT_ASSIGN_OR_RETURN(
      auto decoder,
      FrameDecoder::ForChains(std::move(c.opener), limits_.max_raw, {link.backward, "none"},
                              std::move(gradients), klt_math_));
  STRAIT_ASSIGN_OR_RETURN(
      links.backward_in,
      FrameReceiver::Create(gateway_, std::move(decoder), {SiteId(peer), index_, v1::BACKWARD},
                            metrics_, limits_.window));
  return absl::OkStatus();
}

absl::Status LinkBuilder::AddTied(int peer, StageLinks& links) {
  const bool first = index_ == 0;
  const LinkSpec link = TiedLink(spec_);
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, CryptoWith(link, peer));
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(c.sealer)));
  STRAIT_ASSIGN_OR_RETURN(links.tied_out, FrameSender::Create(gateway_, std::move(encoder), 0,
                                                              first ? v1::FORWARD : v1::BACKWARD,
                                                              metrics_, limits_.window));
  STRAIT_ASSIGN_OR_RETURN(
      links.tied_in,
      FrameReceiver::Create(gateway_, FrameDecoder::Lossless(std::move(c.opener), limits_.max_raw),
                            {SiteId(peer), 0, first ? v1::BACKWARD : v1::FORWARD}, metrics_,
                            limits_.window));
  return absl::OkStatus();
}

absl::Status LinkBuilder::AddReplicaSums(StageLinks& links) {
  const LinkSecurity* security = sealing_.security;
  if (security == nullptr) {
    return absl::FailedPreconditionError(
        "replicas mask what they sum with keys signed by their certificates, and this site has "
        "no signed key (it has not joined)");
  }
  std::vector<crypto::LinkEnd> ends;
  for (const std::string& id : spec_.StageReplicaIds(index_)) {
    if (id == SiteId(index_)) continue;  // This site.
    absl::StatusOr<crypto::LinkEnd> end = security->VerifiedEnd(id, PeerKeyOf(sealing_, id));
    if (!end.ok()) {
      return absl::Status(
          end.status().code(),
          absl::StrCat("the key of replica ", id, " does not verify: ", end.status().message()));
    }
    ends.push_back(*std::move(end));
  }
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", nullptr));
  STRAIT_ASSIGN_OR_RETURN(links.sum_out,
                          FrameSender::Create(gateway_, std::move(encoder), index_, v1::FORWARD,
                                              metrics_, /*max_pending=*/2));
  STRAIT_ASSIGN_OR_RETURN(
      links.sum_in,
      FrameReceiver::Create(gateway_, FrameDecoder::Lossless(nullptr, limits_.max_sum_raw),
                            {"the gateway's sum", index_, v1::BACKWARD}, metrics_, /*window=*/2));
  links.mask = [security, ends = std::move(ends)](absl::string_view round,
                                                  std::span<uint32_t> words) {
    return security->AddMasks(round, ends, words);
  };
  return absl::OkStatus();
}

absl::Status LinkBuilder::AddTeacherTargets(StageLinks& links) {
  const std::string& id = spec_.teacher.sites.back().id;
  const std::string& first = spec_.teacher.sites.front().id;
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, TeachCryptoWith(spec_, sealing_, id));
  if (first != id) {  // The pace goes to another teacher site than the targets come from.
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto pace, TeachCryptoWith(spec_, sealing_, first));
    c.sealer = std::move(pace.sealer);
  }
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(c.sealer)));
  STRAIT_ASSIGN_OR_RETURN(
      links.pace_out,
      FrameSender::Create(gateway_, std::move(encoder), 0, v1::BACKWARD, metrics_, limits_.window));
  const uint64_t max_raw =
      TeacherTargetsBytes(int64_t{spec_.training.MicrobatchSize()} * spec_.model.TargetsPerSample(),
                          spec_.teacher.top_k, spec_.teacher.values, spec_.model.Classes());
  STRAIT_ASSIGN_OR_RETURN(
      links.teacher_in,
      FrameReceiver::Create(gateway_, FrameDecoder::Lossless(std::move(c.opener), max_raw),
                            {id, spec_.TeacherStages() - 1, v1::FORWARD}, metrics_,
                            limits_.window));
  return absl::OkStatus();
}

absl::StatusOr<StageLinks> LinkBuilder::Build() {
  const int stages = static_cast<int>(spec_.sites.size());
  StageLinks links;
  if (index_ > 0) STRAIT_RETURN_IF_ERROR(AddPrevious(links));
  if (index_ < stages - 1) STRAIT_RETURN_IF_ERROR(AddNext(links));
  if (const std::optional<int> peer = TiedLinkPeer(spec_, index_)) {
    STRAIT_RETURN_IF_ERROR(AddTied(*peer, links));
  }
  if (spec_.Replicas() > 1) STRAIT_RETURN_IF_ERROR(AddReplicaSums(links));
  if (spec_.has_teacher && index_ == stages - 1) STRAIT_RETURN_IF_ERROR(AddTeacherTargets(links));
  return links;
}

}  // namespace

// A link carries as many frames at once as its deeper producer or consumer holds (stage 0 may hold
// many more than the last stage with extra_in_flight), and a shallower window would allow only
// that many frames per link round trip. The gateway's memory budget still bounds what is stored.
int LinkWindow(const JobSpec& spec) {
  const int stages = static_cast<int>(spec.sites.size());
  int window = 0;
  for (int s = 0; s < stages; ++s) {
    window = std::max(window, MaxInFlight(StageSchedule(spec.training.schedule, stages, s,
                                                        spec.training.microbatches,
                                                        spec.training.extra_in_flight)) +
                                  1);
  }
  return window;
}

LinkLimits LinkLimitsOf(const JobSpec& spec, const StageExecutor& stage, int window) {
  LinkLimits limits{.window = window};
  limits.max_raw = static_cast<uint64_t>(spec.training.MicrobatchSize()) *
                   std::max(stage.input_features(), stage.output_features()) * 4;
  if (TiedAcrossSites(spec)) {  // Tied gradients: on their own link, or on the one of two sites.
    limits.max_raw =
        std::max<uint64_t>(limits.max_raw, TiedMatrixOf(spec.model)->numel * sizeof(float));
  }
  limits.max_sum_raw = static_cast<uint64_t>(stage.param_count()) * 4;
  return limits;
}

absl::StatusOr<StageLinks> BuildTeacherLinks(const JobSpec& spec, int teacher_stage,
                                             GatewayLink& gateway, const LinkSealing& sealing,
                                             SiteMetrics& metrics, const LinkLimits& limits) {
  const int teachers = spec.TeacherStages();
  StageLinks links;
  if (teacher_stage > 0) {
    const std::string& id = spec.teacher.sites[teacher_stage - 1].id;
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, TeachCryptoWith(spec, sealing, id));
    STRAIT_ASSIGN_OR_RETURN(
        links.forward_in,
        FrameReceiver::Create(gateway, FrameDecoder::Lossless(std::move(c.opener), limits.max_raw),
                              {id, teacher_stage - 1, v1::FORWARD}, metrics, limits.window));
  }
  const std::string& student_last = spec.sites.back().id;
  const std::string& next =
      teacher_stage + 1 < teachers ? spec.teacher.sites[teacher_stage + 1].id : student_last;
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, TeachCryptoWith(spec, sealing, next));
  if (teacher_stage == 0) {  // The student's pace (core/teach_links.h).
    std::unique_ptr<crypto::Opener> opener = std::move(c.opener);
    if (next != student_last) {
      STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto pace,
                              TeachCryptoWith(spec, sealing, student_last));
      opener = std::move(pace.opener);
    }
    STRAIT_ASSIGN_OR_RETURN(
        links.pace_in,
        FrameReceiver::Create(gateway, FrameDecoder::Lossless(std::move(opener), 1),
                              {student_last, 0, v1::BACKWARD}, metrics, limits.window));
  }
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(c.sealer)));
  STRAIT_ASSIGN_OR_RETURN(links.forward_out,
                          FrameSender::Create(gateway, std::move(encoder), teacher_stage,
                                              v1::FORWARD, metrics, limits.window));
  return links;
}

absl::StatusOr<ServeLinks> BuildServeLinks(const JobSpec& spec, int index, GatewayLink& gateway,
                                           const LinkSealing& sealing,
                                           const v1::ServeRequest& request, SiteMetrics& metrics) {
  const int stages = spec.Stages();
  const bool first = index == 0, last = index == stages - 1;
  const std::string purpose = absl::StrCat(kServeKeyPurpose, "/", request.request());
  const std::string& client = request.client().site_id();
  // The keys with each peer, derived once (a peer may be at both ends of two of the links).
  std::map<std::string, LinkSecurity::LinkCrypto> crypto;
  auto with = [&](const std::string& id) -> absl::StatusOr<LinkSecurity::LinkCrypto*> {
    if (auto it = crypto.find(id); it != crypto.end()) return &it->second;
    if (id == client) {
      if (sealing.security == nullptr) return absl::FailedPreconditionError("not joined");
      absl::StatusOr<LinkSecurity::LinkCrypto> c = sealing.security->Derive(
          id, request.client(), TeachLink(spec).rotate_bytes, sealing.generation, purpose);
      if (!c.ok()) {
        return absl::Status(
            c.status().code(),
            absl::StrCat("the key of client ", id, " does not verify: ", c.status().message()));
      }
      return &crypto.emplace(id, *std::move(c)).first->second;
    }
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c,
                            DeriveWith(sealing, id, TeachLink(spec).rotate_bytes, purpose));
    return &crypto.emplace(id, std::move(c)).first->second;
  };
  const uint64_t max_raw =
      static_cast<uint64_t>(spec.model.gpt.context) * std::max(spec.model.gpt.dim, 1) * 4;
  auto receiver = [&](const std::string& from, int boundary, v1::Direction direction,
                      std::unique_ptr<FrameReceiver>& out) -> absl::Status {
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto * c, with(from));
    STRAIT_ASSIGN_OR_RETURN(
        out, FrameReceiver::Create(gateway, FrameDecoder::Lossless(std::move(c->opener), max_raw),
                                   {from, boundary, direction}, metrics, /*window=*/4));
    return absl::OkStatus();
  };
  auto sender = [&](const std::string& to, int boundary, v1::Direction direction,
                    std::unique_ptr<FrameSender>& out) -> absl::Status {
    STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto * c, with(to));
    STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create("none", std::move(c->sealer)));
    STRAIT_ASSIGN_OR_RETURN(out, FrameSender::Create(gateway, std::move(encoder), boundary,
                                                     direction, metrics, /*max_pending=*/4));
    return absl::OkStatus();
  };
  const std::string& first_id = spec.sites.front().id;
  const std::string& last_id = spec.sites.back().id;
  ServeLinks links;
  if (first) {
    STRAIT_RETURN_IF_ERROR(receiver(client, stages - 1, v1::FORWARD, links.in));
    if (!last) STRAIT_RETURN_IF_ERROR(receiver(last_id, 0, v1::BACKWARD, links.tokens_in));
  } else {
    STRAIT_RETURN_IF_ERROR(receiver(spec.sites[index - 1].id, index - 1, v1::FORWARD, links.in));
  }
  if (!last) {
    STRAIT_RETURN_IF_ERROR(sender(spec.sites[index + 1].id, index, v1::FORWARD, links.out));
  } else {
    if (!first) STRAIT_RETURN_IF_ERROR(sender(first_id, 0, v1::BACKWARD, links.tokens_out));
    STRAIT_RETURN_IF_ERROR(sender(client, 1, v1::BACKWARD, links.client_out));
  }
  return links;
}

absl::StatusOr<StageLinks> BuildStageLinks(const JobSpec& spec, int index, GatewayLink& gateway,
                                           const LinkSealing& sealing, SiteMetrics& metrics,
                                           const LinkLimits& limits) {
  return LinkBuilder(spec, index, gateway, sealing, metrics, limits).Build();
}

}  // namespace strait::site
