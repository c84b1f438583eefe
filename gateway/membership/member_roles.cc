#include "gateway/membership/member_roles.h"

#include <algorithm>
#include <optional>

#include "core/teach_links.h"
#include "core/tied_embeddings.h"

namespace strait::gateway {

v1::SiteInfo InitialMemberInfo(const JobSpec& spec, const JobView& view, int slot) {
  const int teacher_stage = spec.TeacherStageOf(slot);
  const SiteSpec& s = ExpectedMember(spec, slot);
  v1::SiteInfo info;
  info.set_id(spec.MemberIdAt(slot));
  const LayerRange layers = teacher_stage >= 0 ? s.layers : view.Layers(slot % spec.Stages());
  if (teacher_stage >= 0) {
    info.set_stage(static_cast<uint32_t>(teacher_stage));
    info.set_teacher(true);
  } else {
    info.set_stage(static_cast<uint32_t>(slot % spec.Stages()));
    info.set_replica(static_cast<uint32_t>(slot / spec.Stages()));
  }
  info.mutable_layers()->set_start(layers.start);
  info.mutable_layers()->set_end(layers.end);
  info.set_device(ToString(s.device));
  info.set_workers(s.workers);
  info.set_machines(s.machines);
  info.set_state(v1::SITE_ABSENT);
  return info;
}

const SiteSpec& ExpectedMember(const JobSpec& spec, int slot) {
  const int teacher_stage = spec.TeacherStageOf(slot);
  return teacher_stage >= 0 ? spec.teacher.sites[teacher_stage] : spec.sites[slot % spec.Stages()];
}

std::vector<int> KeyPartners(const JobSpec& spec, int slot) {
  const std::vector<int> teach = TeachLinkPartners(spec, slot);
  if (spec.TeacherStageOf(slot) >= 0) return teach;
  const int stages = spec.Stages();
  std::vector<int> partners;
  const int index = slot % stages, base = slot - index;
  for (int other = 0; other < stages; ++other) {
    if (other != index && (spec.SplitMayMove() || other == index - 1 || other == index + 1)) {
      partners.push_back(base + other);
    }
  }
  if (const std::optional<int> tied = TiedLinkPeer(spec, index); tied && !spec.SplitMayMove()) {
    partners.push_back(base + *tied);
  }
  for (int r = 0; r < spec.Replicas(); ++r) {
    if (r * stages + index != slot) partners.push_back(r * stages + index);
  }
  // Serving: the last stage sends the first the tokens it samples.
  if (const int other = index == 0 ? stages - 1 : 0;
      !spec.serving.clients.empty() && (index == 0 || index == stages - 1) && other != index &&
      std::find(partners.begin(), partners.end(), base + other) == partners.end()) {
    partners.push_back(base + other);
  }
  partners.insert(partners.end(), teach.begin(), teach.end());
  return partners;
}

}  // namespace strait::gateway
