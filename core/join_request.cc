#include "core/join_request.h"

#include "core/job_agreement.h"

namespace strait {

v1::JoinRequest JoinRequestFor(const JobSpec& spec, const JobView& view, int stage,
                               v1::SignedKey key) {
  const SiteSpec& site = spec.sites[stage];
  v1::JoinRequest join;
  join.set_federation(spec.name);
  join.mutable_layers()->set_start(view.Layers(stage).start);
  join.mutable_layers()->set_end(view.Layers(stage).end);
  join.set_device(ToString(site.device));
  join.set_workers(site.workers);
  join.set_agreed_job(AgreedJobText(spec, view.planned));
  *join.mutable_key() = std::move(key);
  return join;
}

v1::JoinRequest JoinRequestFor(const JobSpec& spec, int stage, v1::SignedKey key) {
  return JoinRequestFor(spec, JobView::Initial(spec), stage, std::move(key));
}

v1::JoinRequest TeacherJoinRequest(const JobSpec& spec, int teacher_stage, v1::SignedKey key) {
  const SiteSpec& site = spec.teacher.sites[teacher_stage];
  v1::JoinRequest join;
  join.set_federation(spec.name);
  join.mutable_layers()->set_start(site.layers.start);
  join.mutable_layers()->set_end(site.layers.end);
  join.set_device(ToString(site.device));
  join.set_workers(site.workers);
  join.set_agreed_job(AgreedJobText(spec));
  *join.mutable_key() = std::move(key);
  return join;
}

v1::SignedKey UnsignedKey(const std::string& site_id, uint32_t epoch) {
  v1::SignedKey key;
  key.set_site_id(site_id);
  key.set_epoch(epoch);
  return key;
}

}  // namespace strait
