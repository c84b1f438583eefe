// What each member of a federation is, by member slot (JobSpec::MemberSlots): a student site (stage
// s of pipeline r) or, with knowledge sharing, a teacher site (teacher stage t;
// docs/distillation.md). The Federation asks here what a member must claim when it joins, whose
// keys it gets, and whether its checkpoints count for the step training resumes from. Pure
// functions of the job spec.
#pragma once

#include <vector>

#include "core/job_spec.h"
#include "core/job_view.h"
#include "strait/v1/federation.pb.h"

namespace strait::gateway {

// The member's description before it joins (id, stage, replica or teacher, layers, device,
// workers, machines; state ABSENT). Student sites' layers come from `view`.
v1::SiteInfo InitialMemberInfo(const JobSpec& spec, const JobView& view, int slot);

// What the member's JoinRequest must claim: its layers, device and workers.
const SiteSpec& ExpectedMember(const JobSpec& spec, int slot);

// The members whose link keys the member in `slot` gets, and which get its key: its neighbours in
// its pipeline, the other end of the first and last stage's own link for tied embeddings
// (core/tied_embeddings.h); with a planned split every other student site (layers may move between
// any two); with replicas the other replicas of its stage (their pairwise masks:
// crypto/pairwise_masks.h); a teacher stage's neighbours in the teacher, and the teacher's last
// stage and the student's last site each other; with serving clients the first and the last stage
// each other.
std::vector<int> KeyPartners(const JobSpec& spec, int slot);

// True when the member's checkpoints decide the step training (re)starts from: a student site's.
// A teacher holds nothing that training changes, so it starts from any step.
inline bool CheckpointsCount(const JobSpec& spec, int slot) { return slot < spec.SiteSlots(); }

}  // namespace strait::gateway
