#include "site/pipeline/worker_set.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

WorkerSet::WorkerSet(int count) : workers_(count) {
  if (count > 1) pool_ = std::make_unique<WorkerPool>(count);
}

absl::StatusOr<std::unique_ptr<WorkerSet>> WorkerSet::Create(
    int count, const std::function<absl::Status(int w, Worker& worker)>& make) {
  std::unique_ptr<WorkerSet> set(new WorkerSet(count));
  STRAIT_RETURN_IF_ERROR(set->OnWorkers([&](int w) { return make(w, set->workers_[w]); }));
  return set;
}

WorkerSet::~WorkerSet() {
  OnWorkers([&](int w) {
    Worker& worker = workers_[w];
    worker.optimizer.reset();
    worker.history.reset();
    worker.stage.reset();
    worker.backend.reset();
    return absl::OkStatus();
  }).IgnoreError();
}

std::string WorkerSet::device_names() const {
  std::string names;
  for (const Worker& w : workers_) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", w.backend->Name());
  }
  return names;
}

absl::Status WorkerSet::OnWorkers(const std::function<absl::Status(int)>& fn) const {
  if (pool_ == nullptr) return fn(0);
  return pool_->Run(fn);
}

}  // namespace strait::site
