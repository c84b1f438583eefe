#include "core/teach_links.h"

#include <algorithm>

namespace strait {

std::vector<int> TeachLinkPartners(const JobSpec& spec, int slot) {
  const int teachers = spec.TeacherStages();
  if (teachers == 0) return {};
  const int student_last = spec.Stages() - 1;  // Slot of the last stage of the one pipeline.
  const int teacher_first = spec.SiteSlots(), teacher_last = teacher_first + teachers - 1;
  std::vector<int> partners;
  if (slot == student_last) {
    partners.push_back(teacher_last);
    if (teacher_first != teacher_last) partners.push_back(teacher_first);
    return partners;
  }
  const int t = spec.TeacherStageOf(slot);
  if (t < 0) return {};
  if (t > 0) partners.push_back(slot - 1);
  partners.push_back(slot < teacher_last ? slot + 1 : student_last);
  if (t == 0 && teacher_first != teacher_last) partners.push_back(student_last);
  return partners;
}

LinkSpec TeachLink(const JobSpec& spec) {
  LinkSpec link;
  for (const LinkSpec& l : spec.links)
    link.rotate_bytes = std::min(link.rotate_bytes, l.rotate_bytes);
  return link;
}

}  // namespace strait
