#include "core/job_view.h"

namespace strait {

JobView JobView::Initial(const JobSpec& spec, int replica) {
  JobView view{.replica = replica};
  for (const SiteSpec& site : spec.sites) view.split.push_back(site.layers);
  return view;
}

}  // namespace strait
