// Every key of the job spec and where it stands in the agreement between the processes of a
// federation (job_agreement.h): the line of the agreed job text that carries it, or none for a key
// that may differ between the copies of the file (an address, a path, a checkpoint setting). The
// parser refuses a key that is missing here (JobSpecParser::Finish), so a new key cannot be
// forgotten; a unit test checks that every named line exists.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/job_spec.h"

namespace strait {

struct JobField {
  absl::string_view path;  // "training.optimizer.lr"; a list's elements as "sites[].layers".
  // The key of the AgreedJobText line that carries it, or empty: each process may set it alone.
  absl::string_view agreed_line;
};

// One line (or, for the model's layers, the sites and the links, one line per element) of the
// agreed job text: `key` names it, `append` writes it. `split_planned`: the planner chose the
// split (core/job_view.h JobView::planned).
struct AgreedLine {
  absl::string_view key;
  void (*append)(const JobSpec& spec, bool split_planned, std::string& out);
};

const std::vector<JobField>& JobFields();
// The lines in the text's order.
const std::vector<AgreedLine>& AgreedLines();

// The field of `path` ("sites[2].layers" finds "sites[].layers"), or null.
const JobField* FindJobField(absl::string_view path);
// True when `path` holds fields ("training.optimizer", "sites", "sites[0]").
bool IsJobSection(absl::string_view path);

}  // namespace strait
