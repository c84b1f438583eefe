#include "site/pipeline/local_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/backend_factory.h"

namespace strait::site {
namespace {

absl::Status CheckWorkers(int max_batch, const StageWorkers& workers) {
  if (max_batch < 1 || workers.count < 1 || workers.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage of ", workers.count, " workers with ", workers.threads,
                     " threads each and microbatches of ", max_batch, ": all must be at least 1"));
  }
  const bool leads = workers.rank == 0 && workers.ranks > 1;
  if (workers.ranks < 1 || workers.rank < 0 || workers.rank >= workers.ranks ||
      leads != (workers.peers != nullptr) || (leads && workers.peers->ranks() != workers.ranks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage of rank ", workers.rank, " of ", workers.ranks,
                     workers.peers != nullptr ? " with followers" : " without followers",
                     ": the leader of several ranks, and only it, mirrors its calls to them"));
  }
  if (workers.tensor_parallel < 1 || workers.ranks % workers.tensor_parallel != 0 ||
      (workers.tensor_parallel > 1 && (workers.count != 1 || workers.tensor_reducer == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallel ", workers.tensor_parallel, " over ", workers.ranks,
                     " ranks of ", workers.count,
                     " workers: it needs a multiple of it in ranks, one worker each, and a "
                     "tensor reducer"));
  }
  return absl::OkStatus();
}

// Rows [first, ...) of a boundary tensor of `features` floats a row. A payload is the whole
// microbatch's: only a stage of one worker and one rank takes one (CheckBoundaries).
BoundaryIn BoundaryRows(const BoundaryIn& in, int64_t first, int64_t features) {
  if (in.encoded() || in.host == nullptr) return in;
  return in.host + first * features;
}
BoundaryOut BoundaryRows(const BoundaryOut& out, int64_t first, int64_t features) {
  if (out.encoded() || out.host == nullptr) return out;
  return out.host + first * features;
}

// Whether a stage of `workers` (`count` in this process) takes value payloads.
bool TakesPayloads(const StageWorkers& workers, int count) {
  if (count != 1 || workers.ranks != 1) return false;
  switch (workers.boundary_codecs) {
    case BoundaryCodecs::kHost:
      return false;
    case BoundaryCodecs::kBackend:
      return true;
    case BoundaryCodecs::kAuto:
      return workers.device == DeviceKind::kCuda;
  }
  return false;
}

// What the stage of `workers` is (worker 0's stage and history stand for every worker's).
StageShape ShapeOf(const WorkerSet& workers, int max_batch, bool boundary_payloads) {
  const Stage& stage = *workers.at(0).stage;
  const WeightHistory& history = *workers.at(0).history;
  return {.range = stage.range(),
          .is_last = stage.is_last(),
          .input_features = stage.input_features(),
          .output_features = stage.output_features(),
          .param_count = stage.full_param_count(),
          .max_batch = max_batch,
          .bytes_per_microbatch = stage.bytes_per_microbatch() * workers.count(),
          .workers = workers.count(),
          .weight_versions = history.versions(),
          .lookahead = history.lookahead(),
          .fingerprint = stage.Fingerprint(),
          .device_names = workers.device_names(),
          .boundary_payloads = boundary_payloads};
}

}  // namespace

LocalExecutor::LocalExecutor(int max_batch, RowSplit rows, TensorReducer* tensor_reducer,
                             bool boundary_payloads, std::unique_ptr<WorkerSet> workers)
    : StageExecutor(ShapeOf(*workers, max_batch, boundary_payloads)),
      rows_(rows),
      tensor_reducer_(tensor_reducer),
      workers_(std::move(workers)),
      state_(*workers_) {}

LocalExecutor::~LocalExecutor() = default;

absl::StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::Create(
    const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
    WeightVersioning versioning, const StageWorkers& workers) {
  STRAIT_RETURN_IF_ERROR(CheckWorkers(max_batch, workers));
  const RowSplit rows =
      SiteRows(workers.ranks, workers.tensor_parallel, workers.count).ForRank(workers.rank);
  const TensorShard shard{workers.tensor_parallel, workers.rank % workers.tensor_parallel,
                          workers.tensor_reducer};
  // Each worker's stage is sized for its share of a microbatch.
  const int worker_batch = rows.MaxRows(max_batch);
  // Each worker makes its backend and the rest on its own thread (CUDA: device w becomes current).
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<WorkerSet> set,
      WorkerSet::Create(workers.count, [&](int w, Worker& worker) -> absl::Status {
        if (workers.make_backend) {
          STRAIT_ASSIGN_OR_RETURN(worker.backend, workers.make_backend(w));
        } else {
          STRAIT_ASSIGN_OR_RETURN(
              worker.backend,
              CreateBackend(workers.device, {workers.threads, w, workers.precision}));
        }
        STRAIT_ASSIGN_OR_RETURN(
            worker.stage, Stage::Create(model, range, worker_batch, worker.backend.get(), shard));
        STRAIT_ASSIGN_OR_RETURN(worker.history, WeightHistory::Create(*worker.stage, versioning));
        STRAIT_ASSIGN_OR_RETURN(
            worker.optimizer,
            Optimizer::Create(optimizer, worker.stage->param_count(), worker.backend.get()));
        worker.views.resize(worker.stage->layers().size());
        return worker.backend->Sync();
      }));
  std::unique_ptr<LocalExecutor> e(new LocalExecutor(max_batch, rows, workers.tensor_reducer,
                                                     TakesPayloads(workers, workers.count),
                                                     std::move(set)));
  STRAIT_ASSIGN_OR_RETURN(
      e->buckets_, GradientBuckets::Create(*e->workers_,
                                           workers.make_reducer ? workers.make_reducer
                                                                : InProcessReducer(workers.device),
                                           workers.device));
  return e;
}

absl::Status LocalExecutor::TensorStatus() const {
  return tensor_reducer_ == nullptr ? absl::OkStatus() : tensor_reducer_->status();
}

absl::Status LocalExecutor::ComposeViews(Worker& w, const InFlight& mb, const char* what) {
  if (mb.layer_weights.empty()) {
    STRAIT_ASSIGN_OR_RETURN(const std::vector<LayerParams>* views,
                            w.history->Views(mb.weights, mb.step, what));
    for (size_t i = 0; i < w.views.size(); ++i) w.views[i] = &(*views)[i];
    return absl::OkStatus();
  }
  for (size_t i = 0; i < w.views.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(const std::vector<LayerParams>* views,
                            w.history->Views(mb.layer_weights[i], mb.step, what));
    w.views[i] = &(*views)[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalExecutor::InFlight> LocalExecutor::CheckForward(
    int64_t step, int microbatch, int n, const ForwardOptions& options) const {
  if (n < 1 || n > max_batch()) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatch of ", n, " samples; this stage takes 1 to ", max_batch()));
  }
  if (holds(microbatch)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Forward(microbatch ", microbatch, ") while it is already in flight"));
  }
  const size_t layers = stage().layers().size();
  if (!options.layer_weights.empty() && options.layer_weights.size() != layers) {
    return absl::InvalidArgumentError(absl::StrCat("Forward with weights for ",
                                                   options.layer_weights.size(),
                                                   " layers; the stage has ", layers));
  }
  InFlight mb{n, step, options.weights, options.layer_weights};
  if (mb.weights == kNewestWeights) mb.weights = weights_version();
  for (int64_t& v : mb.layer_weights) {
    if (v == kNewestWeights) v = weights_version();
  }
  return mb;
}

absl::Status LocalExecutor::CheckBoundaries(const BoundaryIn& in, const BoundaryOut& out,
                                            const char* call) const {
  if ((in.encoded() || out.encoded()) && !boundary_payloads()) {
    return absl::FailedPreconditionError(
        absl::StrCat(call, " with a codec payload on a stage that takes host floats (", workers(),
                     " workers; payloads need one worker on a site of one rank)"));
  }
  return absl::OkStatus();
}

absl::Status LocalExecutor::Forward(int64_t step, int microbatch, int n, const BoundaryIn& input,
                                    const BoundaryOut& output, const ForwardOptions& options) {
  STRAIT_RETURN_IF_ERROR(CheckBoundaries(input, output, "Forward"));
  STRAIT_ASSIGN_OR_RETURN(InFlight mb, CheckForward(step, microbatch, n, options));
  const PassOptions pass{step, options.training, 0, options.dropout_microbatch_offset};
  absl::Status s = workers_->OnWorkers(
      [&](int w) { return ForwardOnWorker(w, microbatch, mb, input, output, pass); });
  if (!s.ok()) {
    workers_
        ->OnWorkers([&](int w) {
          workers_->at(w).stage->Discard(microbatch);
          return absl::OkStatus();
        })
        .IgnoreError();
    return s;
  }
  in_flight_[microbatch] = std::move(mb);
  return absl::OkStatus();
}

absl::Status LocalExecutor::ForwardOnWorker(int w, int microbatch, const InFlight& mb,
                                            const BoundaryIn& input, const BoundaryOut& output,
                                            const PassOptions& pass) {
  const auto [first, rows] = rows_.Rows(mb.rows, w);
  if (rows == 0) return absl::OkStatus();
  Worker& worker = workers_->at(w);
  STRAIT_RETURN_IF_ERROR(ComposeViews(worker, mb, "Forward"));
  const int64_t in = input_features(), out = output_features();
  PassOptions worker_pass = pass;
  worker_pass.first_row = first;
  STRAIT_RETURN_IF_ERROR(worker.stage->Forward(microbatch, rows, BoundaryRows(input, first, in),
                                               BoundaryRows(output, first, out), worker.views,
                                               worker_pass));
  return TensorStatus();
}

absl::StatusOr<const LocalExecutor::InFlight*> LocalExecutor::InFlightOf(int microbatch,
                                                                         const char* call) const {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(call, "(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  return &it->second;
}

absl::StatusOr<int> LocalExecutor::CheckLoss(int microbatch) const {
  if (!is_last()) return absl::FailedPreconditionError("Loss on a stage that is not the last");
  STRAIT_ASSIGN_OR_RETURN(const InFlight* mb, InFlightOf(microbatch, "Loss"));
  return mb->rows;
}

absl::StatusOr<std::vector<LossResult>> LocalExecutor::LossParts(int microbatch,
                                                                 const int32_t* labels,
                                                                 float grad_scale,
                                                                 const Teaching* teaching) {
  STRAIT_ASSIGN_OR_RETURN(const int n, CheckLoss(microbatch));
  std::vector<LossResult> parts(workers());
  STRAIT_RETURN_IF_ERROR(workers_->OnWorkers([&](int w) -> absl::Status {
    const auto [first, rows] = rows_.Rows(n, w);
    if (rows == 0) return absl::OkStatus();
    Stage& stage = *workers_->at(w).stage;
    const int64_t first_target = first * stage.targets_per_sample();
    STRAIT_ASSIGN_OR_RETURN(
        parts[w], teaching == nullptr
                      ? stage.Loss(microbatch, labels + first_target, grad_scale)
                      : stage.DistillLoss(microbatch, labels + first_target, *teaching->targets,
                                          first_target, teaching->terms, grad_scale));
    return absl::OkStatus();
  }));
  return parts;
}

absl::StatusOr<LossResult> LocalExecutor::Loss(int microbatch, const int32_t* labels,
                                               float grad_scale) {
  STRAIT_ASSIGN_OR_RETURN(std::vector<LossResult> parts, LossParts(microbatch, labels, grad_scale));
  return Sum(parts);
}

absl::StatusOr<LossResult> LocalExecutor::DistillLoss(int microbatch, const int32_t* labels,
                                                      const TeacherTargets& teacher,
                                                      const DistillTerms& terms, float grad_scale) {
  const Teaching teaching{&teacher, terms};
  STRAIT_ASSIGN_OR_RETURN(std::vector<LossResult> parts,
                          LossParts(microbatch, labels, grad_scale, &teaching));
  return Sum(parts);
}

LossResult LocalExecutor::Sum(const std::vector<LossResult>& parts) {
  LossResult sum;  // In row order: the sum of one process of all rows.
  for (const LossResult& p : parts) {
    sum.loss_sum += p.loss_sum;
    sum.correct += p.correct;
  }
  return sum;
}

absl::Status LocalExecutor::Backward(int microbatch, const BoundaryIn& grad_output,
                                     const BoundaryOut& grad_input, bool last_of_step) {
  STRAIT_RETURN_IF_ERROR(Backpropagate(microbatch, grad_output, grad_input, last_of_step));
  Retire(microbatch);  // Kept after an error: Discard frees what the workers still hold.
  return absl::OkStatus();
}

absl::Status LocalExecutor::Backpropagate(int microbatch, const BoundaryIn& grad_output,
                                          const BoundaryOut& grad_input, bool last_of_step) {
  STRAIT_RETURN_IF_ERROR(CheckBoundaries(grad_output, grad_input, "Backward"));
  STRAIT_ASSIGN_OR_RETURN(const InFlight* mb, InFlightOf(microbatch, "Backward"));
  STRAIT_RETURN_IF_ERROR(workers_->OnWorkers([&](int w) {
    return BackwardOnWorker(w, microbatch, *mb, grad_output, grad_input, last_of_step);
  }));
  return TensorStatus();
}

absl::Status LocalExecutor::BackwardOnWorker(int w, int microbatch, const InFlight& mb,
                                             const BoundaryIn& grad_output,
                                             const BoundaryOut& grad_input, bool last_of_step) {
  const auto [first, rows] = rows_.Rows(mb.rows, w);
  Worker& worker = workers_->at(w);
  GradientRound round(*buckets_, w, *worker.backend, mb.step, last_of_step);
  absl::Status pass;
  if (rows > 0) {
    pass = ComposeViews(worker, mb, "Backward");
    if (pass.ok()) {
      const int64_t in = input_features(), out = output_features();
      pass = worker.stage->Backward(microbatch, BoundaryRows(grad_output, first, out),
                                    BoundaryRows(grad_input, first, in), worker.views,
                                    round.layer_done());
    }
  }
  return round.Finish(std::move(pass));
}

void LocalExecutor::Discard(int microbatch) {
  if (in_flight_.erase(microbatch) == 0) return;
  workers_
      ->OnWorkers([&](int w) {
        workers_->at(w).stage->Discard(microbatch);
        return absl::OkStatus();
      })
      .IgnoreError();
}

void LocalExecutor::ZeroGrad(int64_t step) {
  workers_
      ->OnWorkers([&](int w) {
        workers_->at(w).history->ZeroGrads(step);
        return absl::OkStatus();
      })
      .IgnoreError();
}

absl::StatusOr<double> LocalExecutor::GradSumSquares(double downstream, int64_t step) {
  return workers_->FromWorker0<double>(
      [&](const Worker& w) { return w.stage->GradSumSquares(w.history->grads(step), downstream); });
}

absl::StatusOr<double> LocalExecutor::GradSumSquaresOf(int64_t step, double downstream,
                                                       bool split) const {
  return workers_->FromWorker0<double>([&](const Worker& w) {
    return w.stage->GradSumSquaresOf(w.history->grads(step), downstream, split);
  });
}

absl::StatusOr<std::vector<float>> LocalExecutor::TiedGrad(int64_t step) const {
  return workers_->FromWorker0<std::vector<float>>(
      [step](const Worker& w) -> absl::StatusOr<std::vector<float>> {
        const Stage& stage = *w.stage;
        if (stage.tied_offsets().empty()) return std::vector<float>();
        std::vector<float> out(stage.tied_numel());
        w.backend->CopyToHost(out.data(), w.history->grads(step) + stage.tied_offsets().front(),
                              sizeof(float) * out.size());
        STRAIT_RETURN_IF_ERROR(w.backend->Sync());
        return out;
      });
}

absl::StatusOr<std::pair<int64_t, int64_t>> LocalExecutor::LayerSpan(LayerRange layers) const {
  const LayerRange own = range();
  if (layers.start < own.start || layers.end > own.end || layers.start > layers.end) {
    return absl::InvalidArgumentError(absl::StrCat("ScaleGrads of layers [", layers.start, ", ",
                                                   layers.end, ") on a stage of layers [",
                                                   own.start, ", ", own.end, ")"));
  }
  const std::vector<int64_t>& offsets = stage().layer_offsets();
  return std::pair<int64_t, int64_t>{offsets[layers.start - own.start],
                                     offsets[layers.end - own.start]};
}

absl::Status LocalExecutor::ScaleGrads(int64_t step, LayerRange layers, float factor) {
  STRAIT_ASSIGN_OR_RETURN(const auto span, LayerSpan(layers));
  const auto [begin, end] = span;
  if (end == begin) return absl::OkStatus();
  return workers_->OnWorkers([&](int w) -> absl::Status {
    Worker& worker = workers_->at(w);
    float* grads = worker.history->grads(step) + begin;
    // factor * g + 0 * g: exactly factor * g (the zero product adds nothing) on every backend.
    worker.backend->Axpby(end - begin, factor, grads, 0.0f, grads);
    return worker.backend->Sync();
  });
}

absl::Status LocalExecutor::AddTiedGrad(int64_t step, absl::Span<const float> other) {
  return workers_->OnWorkers([&](int w) -> absl::Status {
    Worker& worker = workers_->at(w);
    const Stage& stage = *worker.stage;
    if (static_cast<int64_t>(other.size()) != stage.tied_numel() || stage.tied_offsets().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddTiedGrad: ", other.size(), " floats for a stage holding ",
                       stage.tied_offsets().size(), " copies of ", stage.tied_numel()));
    }
    STRAIT_ASSIGN_OR_RETURN(
        DeviceBuffer buffer,
        DeviceBuffer::Create(worker.backend.get(), sizeof(float) * other.size()));
    worker.backend->CopyToDevice(buffer.f32(), other.data(), buffer.bytes());
    for (int64_t offset : stage.tied_offsets()) {
      worker.backend->Axpy(stage.tied_numel(), 1.0f, buffer.f32(),
                           worker.history->grads(step) + offset);
    }
    return worker.backend->Sync();  // Before the buffer goes.
  });
}

absl::Status LocalExecutor::TieLocalGrads(int64_t step) {
  // Called every step whatever the model: without both copies, no dispatch to the workers.
  if (stage().tied_offsets().size() != 2) return absl::OkStatus();
  return workers_->OnWorkers([&](int w) -> absl::Status {
    Worker& worker = workers_->at(w);
    const Stage& stage = *worker.stage;
    float* grads = worker.history->grads(step);
    float* embed = grads + stage.tied_offsets()[0];
    float* head = grads + stage.tied_offsets()[1];
    worker.backend->Axpy(stage.tied_numel(), 1.0f, head, embed);
    worker.backend->CopyOnDevice(head, embed, sizeof(float) * stage.tied_numel());
    return absl::OkStatus();
  });
}

absl::Status LocalExecutor::CheckUpdate(int64_t step) const {
  const WeightHistory& h = history();
  for (const auto& [index, mb] : in_flight_) {
    const size_t layers = mb.layer_weights.empty() ? 1 : mb.layer_weights.size();
    for (size_t i = 0; i < layers; ++i) {
      const int64_t version = mb.layer_weights.empty() ? mb.weights : mb.layer_weights[i];
      if (h.SurvivesUpdate(version)) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("OptimizerStep(", step, ") while microbatch ", index, " of step ", mb.step,
                       " still uses weights L_", version, ", which it would overwrite"));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalExecutor::OptimizerStep(int64_t step, float grad_scale) {
  STRAIT_RETURN_IF_ERROR(CheckUpdate(step));
  return workers_->OnWorkers([&](int w) {
    Worker& worker = workers_->at(w);
    return worker.history->Update(step, *worker.optimizer, grad_scale);
  });
}

}  // namespace strait::site
