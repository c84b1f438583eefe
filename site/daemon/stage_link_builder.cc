#include "site/daemon/stage_link_builder.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "core/status.h"
#include "core/tied_embeddings.h"

namespace strait::site {
namespace {

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
        limits_(limits) {}

  absl::StatusOr<StageLinks> Build();

 private:
  // The keys of the link with `peer` (a neighbour, or the other end of the tied link) for the
  // generation (no sealing when the link is not encrypted).
  absl::StatusOr<LinkSecurity::LinkCrypto> CryptoWith(const LinkSpec& link, int peer) const;
  // The id of the site of stage `stage` in this site's pipeline (sealing_.replica).
  const std::string& SiteId(int stage) const {
    return spec_.SiteIdAt(sealing_.replica * spec_.Stages() + stage);
  }
  // The signed key of site `id`, empty when it has none (then it does not verify).
  v1::SignedKey PeerKey(const std::string& id) const;
  absl::Status AddPrevious(StageLinks& links);
  absl::Status AddNext(StageLinks& links);
  absl::Status AddTied(int peer, StageLinks& links);
  // Replicas (JobSpec::replicas): the stage's secure sums through the gateway, lossless and not
  // sealed (the gateway adds the words), masked with keys agreed with the stage's other replicas.
  absl::Status AddReplicaSums(StageLinks& links);

  const JobSpec& spec_;
  const int index_;
  GatewayLink& gateway_;
  const LinkSealing& sealing_;
  SiteMetrics& metrics_;
  const LinkLimits& limits_;
};

v1::SignedKey LinkBuilder::PeerKey(const std::string& id) const {
  if (sealing_.peers == nullptr) return {};
  auto key = sealing_.peers->find(id);
  return key == sealing_.peers->end() ? v1::SignedKey{} : key->second;
}

absl::StatusOr<LinkSecurity::LinkCrypto> LinkBuilder::CryptoWith(const LinkSpec& link,
                                                                 int peer) const {
  if (!link.encryption) return LinkSecurity::LinkCrypto{};
  const std::string& id = SiteId(peer);
  if (sealing_.security == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the link with ", id,
                     " is encrypted, but this site has no signed key (it has "
                     "not joined)"));
  }
  absl::StatusOr<LinkSecurity::LinkCrypto> crypto =
      sealing_.security->Derive(id, PeerKey(id), link.rotate_bytes, sealing_.generation);
  if (!crypto.ok()) {
    return absl::Status(
        crypto.status().code(),
        absl::StrCat("the key of site ", id, " does not verify: ", crypto.status().message()));
  }
  return crypto;
}

absl::Status LinkBuilder::AddPrevious(StageLinks& links) {
  const int peer = index_ - 1;
  const LinkSpec& link = spec_.links[peer];
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, CryptoWith(link, peer));
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create(link.backward, std::move(c.sealer)));
  STRAIT_ASSIGN_OR_RETURN(links.backward_out,
                          FrameSender::Create(gateway_, std::move(encoder), peer, v1::BACKWARD,
                                              metrics_, limits_.window));
  STRAIT_ASSIGN_OR_RETURN(
      links.forward_in,
      FrameReceiver::Create(gateway_,
                            std::make_unique<FrameDecoder>(std::move(c.opener), limits_.max_raw),
                            {SiteId(peer), peer, v1::FORWARD}, metrics_, limits_.window));
  return absl::OkStatus();
}

absl::Status LinkBuilder::AddNext(StageLinks& links) {
  const int peer = index_ + 1;
  const LinkSpec& link = spec_.links[index_];
  STRAIT_ASSIGN_OR_RETURN(LinkSecurity::LinkCrypto c, CryptoWith(link, peer));
  STRAIT_ASSIGN_OR_RETURN(auto encoder, FrameEncoder::Create(link.forward, std::move(c.sealer)));
  STRAIT_ASSIGN_OR_RETURN(links.forward_out,
                          FrameSender::Create(gateway_, std::move(encoder), index_, v1::FORWARD,
                                              metrics_, limits_.window));
  STRAIT_ASSIGN_OR_RETURN(
      links.backward_in,
      FrameReceiver::Create(gateway_,
                            std::make_unique<FrameDecoder>(std::move(c.opener), limits_.max_raw),
                            {SiteId(peer), index_, v1::BACKWARD}, metrics_, limits_.window));
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
      FrameReceiver::Create(
          gateway_, std::make_unique<FrameDecoder>(std::move(c.opener), limits_.max_raw),
          {SiteId(peer), 0, first ? v1::BACKWARD : v1::FORWARD}, metrics_, limits_.window));
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
    absl::StatusOr<crypto::LinkEnd> end = security->VerifiedEnd(id, PeerKey(id));
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
      FrameReceiver::Create(gateway_, std::make_unique<FrameDecoder>(nullptr, limits_.max_sum_raw),
                            {"the gateway's sum", index_, v1::BACKWARD}, metrics_, /*window=*/2));
  links.mask = [security, ends = std::move(ends)](absl::string_view round,
                                                  std::span<uint32_t> words) {
    return security->AddMasks(round, ends, words);
  };
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

absl::StatusOr<StageLinks> BuildStageLinks(const JobSpec& spec, int index, GatewayLink& gateway,
                                           const LinkSealing& sealing, SiteMetrics& metrics,
                                           const LinkLimits& limits) {
  return LinkBuilder(spec, index, gateway, sealing, metrics, limits).Build();
}

}  // namespace strait::site
