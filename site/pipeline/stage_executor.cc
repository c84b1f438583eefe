#include "site/pipeline/stage_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/backend_factory.h"

namespace strait::site {

std::pair<int64_t, int> RowSplit::PartRows(int n, int first_part, int count) const {
  const int base = n / parts_, extra = n % parts_;
  auto start = [&](int part) { return int64_t{part} * base + std::min(part, extra); };
  return {start(first_part), static_cast<int>(start(first_part + count) - start(first_part))};
}

ReducerMaker InProcessReducer(DeviceKind device) {
  return [device](const std::vector<Backend*>& backends, std::vector<float*> arenas,
                  std::vector<Bucket> buckets) -> absl::StatusOr<std::unique_ptr<AllReducer>> {
    if (backends.size() < 2) return nullptr;  // One worker's sum is its own gradient.
    if (device == DeviceKind::kCpu) {
      return CreateCpuAllReducer(std::move(arenas), std::move(buckets));
    }
    std::vector<int> devices;
    for (size_t w = 0; w < backends.size(); ++w) devices.push_back(static_cast<int>(w));
    return CreateNcclAllReducer(backends, devices, std::move(arenas), std::move(buckets));
  };
}

StageExecutor::StageExecutor(int max_batch, const StageWorkers& w)
    : max_batch_(max_batch),
      device_(w.device),
      rows_(w.ranks / w.tensor_parallel * w.count, w.rank / w.tensor_parallel * w.count),
      rank_(w.rank),
      ranks_(w.ranks),
      peers_(w.peers),
      tensor_parallel_(w.tensor_parallel),
      tensor_reducer_(w.tensor_reducer),
      workers_(w.count) {
  if (w.count > 1) pool_ = std::make_unique<WorkerPool>(w.count);
}

absl::StatusOr<std::unique_ptr<StageExecutor>> StageExecutor::Create(
    const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
    WeightVersioning versioning, const StageWorkers& workers) {
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
  std::unique_ptr<StageExecutor> e(new StageExecutor(max_batch, workers));
  const TensorShard shard{workers.tensor_parallel, workers.rank % workers.tensor_parallel,
                          workers.tensor_reducer};
  // Each worker makes its backend and the rest on its own thread (CUDA: device w becomes current).
  const int worker_batch = e->rows_.MaxRows(max_batch);
  STRAIT_RETURN_IF_ERROR(e->OnWorkers([&](int w) -> absl::Status {
    Worker& worker = e->workers_[w];
    if (workers.make_backend) {
      STRAIT_ASSIGN_OR_RETURN(worker.backend, workers.make_backend(w));
    } else {
      STRAIT_ASSIGN_OR_RETURN(
          worker.backend, CreateBackend(workers.device, {workers.threads, w, workers.precision}));
    }
    STRAIT_ASSIGN_OR_RETURN(worker.stage,
                            Stage::Create(model, range, worker_batch, worker.backend.get(), shard));
    STRAIT_ASSIGN_OR_RETURN(worker.history, WeightHistory::Create(*worker.stage, versioning));
    STRAIT_ASSIGN_OR_RETURN(
        worker.optimizer,
        Optimizer::Create(optimizer, worker.stage->param_count(), worker.backend.get()));
    worker.views.resize(worker.stage->layers().size());
    return worker.backend->Sync();
  }));
  STRAIT_RETURN_IF_ERROR(e->MakeReducers(workers));
  return e;
}

absl::Status StageExecutor::MakeReducers(const StageWorkers& workers) {
  // One bucket per layer with parameters, numbered in backward order (last layer first), which is
  // the order in which Backward makes them ready.
  const std::vector<int64_t>& offsets = stage(0).layer_offsets();
  const int layers = static_cast<int>(offsets.size()) - 1;
  std::vector<Bucket> buckets;
  layer_bucket_.assign(layers, -1);
  for (int k = layers; k-- > 0;) {
    if (offsets[k + 1] == offsets[k]) continue;
    layer_bucket_[k] = static_cast<int>(buckets.size());
    buckets.push_back({offsets[k], offsets[k + 1] - offsets[k]});
  }
  num_buckets_ = static_cast<int>(buckets.size());
  std::vector<Backend*> backends;
  for (Worker& w : workers_) backends.push_back(w.backend.get());
  const ReducerMaker make =
      workers.make_reducer ? workers.make_reducer : InProcessReducer(workers.device);
  // Gradient arena a holds the gradients of the steps with step % weight_versions == a.
  for (int64_t arena = 0; arena < weight_versions(); ++arena) {
    std::vector<float*> arenas;
    for (Worker& w : workers_) arenas.push_back(w.history->grads(arena));
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<AllReducer> reducer,
                            make(backends, std::move(arenas), buckets));
    if (reducer == nullptr) return absl::OkStatus();  // Nothing to reduce.
    reducers_.push_back(std::move(reducer));
  }
  return absl::OkStatus();
}

StageExecutor::~StageExecutor() {
  reducers_.clear();
  // Each backend is torn down on the thread that made it (its device is current there).
  OnWorkers([&](int w) {
    Worker& worker = workers_[w];
    worker.optimizer.reset();
    worker.history.reset();
    worker.stage.reset();
    worker.backend.reset();
    return absl::OkStatus();
  }).IgnoreError();
}

std::string StageExecutor::device_names() const {
  std::string names;
  for (const Worker& w : workers_) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", w.backend->Name());
  }
  return names;
}

absl::Status StageExecutor::OnWorkers(const std::function<absl::Status(int)>& fn) const {
  if (pool_ == nullptr) return fn(0);
  return pool_->Run(fn);
}

template <class T>
absl::StatusOr<T> StageExecutor::FromWorker0(
    const std::function<absl::StatusOr<T>(const Worker&)>& fn) const {
  absl::StatusOr<T> out;
  STRAIT_RETURN_IF_ERROR(OnWorkers([&](int w) {
    if (w != 0) return absl::OkStatus();
    out = fn(workers_[0]);
    return out.status();
  }));
  return out;
}

absl::Status StageExecutor::ComposeViews(Worker& w, const InFlight& mb, const char* what) {
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

absl::Status StageExecutor::Forward(int64_t step, int microbatch, int n, const float* input,
                                    float* output, const ForwardOptions& options) {
  if (n < 1 || n > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatch of ", n, " samples; this stage takes 1 to ", max_batch_));
  }
  if (in_flight_.count(microbatch) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Forward(microbatch ", microbatch, ") while it is already in flight"));
  }
  const size_t layers = stage(0).layers().size();
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
  const int64_t in = input_features(), out = output_features();
  const PassOptions pass{step, options.training, 0, options.dropout_microbatch_offset};
  auto call = [&](int rank) {
    const auto [first, rows] = RankRows(n, rank);
    RankCall c{.op = RankOp::kForward,
               .step = step,
               .microbatch = microbatch,
               .rows = n,
               .training = options.training,
               .wants_output = output != nullptr && Answers(rank),
               .weights = mb.weights,
               .layer_weights = mb.layer_weights};
    c.values.assign(input + first * in, input + (first + rows) * in);
    return c;
  };
  auto local = [&] {
    return OnWorkers([&](int w) -> absl::Status {
      const auto [first, rows] = rows_.Rows(n, w);
      if (rows == 0) return absl::OkStatus();
      Worker& worker = workers_[w];
      STRAIT_RETURN_IF_ERROR(ComposeViews(worker, mb, "Forward"));
      PassOptions worker_pass = pass;
      worker_pass.first_row = first;
      STRAIT_RETURN_IF_ERROR(worker.stage->Forward(
          microbatch, rows, input + first * in, output != nullptr ? output + first * out : nullptr,
          worker.views, worker_pass));
      return TensorStatus();
    });
  };
  auto gather = [&](int rank, RankResult& result) {
    return output == nullptr || !Answers(rank)
               ? absl::OkStatus()
               : PlaceRows(result.values, RankRows(n, rank), out, output, "output");
  };
  absl::Status s = Mirrored(call, local, gather);
  if (!s.ok()) {
    OnWorkers([&](int w) {
      workers_[w].stage->Discard(microbatch);
      return absl::OkStatus();
    }).IgnoreError();
    return s;
  }
  in_flight_[microbatch] = std::move(mb);
  return absl::OkStatus();
}

absl::StatusOr<LossResult> StageExecutor::Loss(int microbatch, const int32_t* labels,
                                               float grad_scale) {
  if (!is_last()) return absl::FailedPreconditionError("Loss on a stage that is not the last");
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Loss(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  const int n = it->second.rows;
  const int64_t targets = stage(0).targets_per_sample();
  // Every part's result, summed in part order below: the same sum as one process of all parts.
  std::vector<LossResult> parts(int64_t{ranks_ / tensor_parallel_} * workers());
  auto call = [&](int rank) {
    const auto [first, rows] = RankRows(n, rank);
    RankCall c{.op = RankOp::kLoss, .microbatch = microbatch, .scale = grad_scale};
    c.labels.assign(labels + first * targets, labels + (first + rows) * targets);
    return c;
  };
  auto local = [&] {
    return OnWorkers([&](int w) -> absl::Status {
      STRAIT_ASSIGN_OR_RETURN(parts[w], LossOnWorker(w, microbatch, n, labels, grad_scale));
      return absl::OkStatus();
    });
  };
  auto gather = [&](int rank, RankResult& result) {
    if (!Answers(rank)) return absl::OkStatus();  // Its replica's first tensor rank counts.
    if (result.losses.size() != static_cast<size_t>(workers())) {
      return absl::InternalError(absl::StrCat("rank ", rank, " sent ", result.losses.size(),
                                              " losses for ", workers(), " workers"));
    }
    std::copy(result.losses.begin(), result.losses.end(),
              parts.begin() + rank / tensor_parallel_ * workers());
    return absl::OkStatus();
  };
  STRAIT_RETURN_IF_ERROR(Mirrored(call, local, gather));
  LossResult sum;
  for (const LossResult& p : parts) {
    sum.loss_sum += p.loss_sum;
    sum.correct += p.correct;
  }
  return sum;
}

absl::StatusOr<LossResult> StageExecutor::LossOnWorker(int w, int microbatch, int n,
                                                       const int32_t* labels, float grad_scale) {
  const auto [first, rows] = rows_.Rows(n, w);
  if (rows == 0) return LossResult{};
  Stage& stage = *workers_[w].stage;
  return stage.Loss(microbatch, labels + first * stage.targets_per_sample(), grad_scale);
}

absl::Status StageExecutor::Backward(int microbatch, const float* grad_output, float* grad_input,
                                     bool last_of_step) {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Backward(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  const InFlight& mb = it->second;
  const int64_t in = input_features(), out = output_features();
  auto call = [&](int rank) {
    const auto [first, rows] = RankRows(mb.rows, rank);
    RankCall c{.op = RankOp::kBackward,
               .microbatch = microbatch,
               .last_of_step = last_of_step,
               // Every tensor rank computes the input gradient (its last all-reduce is part of
               // that); only the first of a replica's is used.
               .wants_output = grad_input != nullptr};
    if (grad_output != nullptr) {
      c.values.assign(grad_output + first * out, grad_output + (first + rows) * out);
    }
    return c;
  };
  auto local = [&] {
    STRAIT_RETURN_IF_ERROR(OnWorkers([&](int w) {
      return BackwardOnWorker(w, microbatch, mb, grad_output, grad_input, last_of_step);
    }));
    return TensorStatus();
  };
  auto gather = [&](int rank, RankResult& result) {
    return grad_input == nullptr || !Answers(rank)
               ? absl::OkStatus()
               : PlaceRows(result.values, RankRows(mb.rows, rank), in, grad_input,
                           "input gradient");
  };
  STRAIT_RETURN_IF_ERROR(Mirrored(call, local, gather));
  in_flight_.erase(it);  // Kept after an error: Discard frees what the workers still hold.
  return absl::OkStatus();
}

absl::Status StageExecutor::BackwardOnWorker(int w, int microbatch, const InFlight& mb,
                                             const float* grad_output, float* grad_input,
                                             bool last_of_step) {
  const auto [first, rows] = rows_.Rows(mb.rows, w);
  Worker& worker = workers_[w];
  AllReducer* reducer =
      last_of_step && !reducers_.empty() ? reducers_[mb.step % reducers_.size()].get() : nullptr;
  int next_bucket = 0;  // Buckets become ready in increasing order.
  absl::Status status;
  std::function<void(int)> layer_done;
  if (reducer != nullptr) {
    layer_done = [&](int layer) {
      const int bucket = layer_bucket_[layer];
      if (bucket < 0) return;
      // The CPU reduction reads the arena directly: the backward's work must be done. (CUDA: the
      // NCCL reducer orders itself after the queued work without waiting.)
      if (device_ == DeviceKind::kCpu) status.Update(worker.backend->Sync());
      reducer->Ready(w, bucket);
      next_bucket = bucket + 1;
    };
  }
  if (rows > 0) {
    status.Update(ComposeViews(worker, mb, "Backward"));
    if (status.ok()) {
      const int64_t in = input_features(), out = output_features();
      status.Update(worker.stage->Backward(
          microbatch, grad_output != nullptr ? grad_output + first * out : nullptr,
          grad_input != nullptr ? grad_input + first * in : nullptr, worker.views, layer_done));
    }
  }
  if (reducer != nullptr) {
    // A worker without rows, or whose backward failed, still takes part in the round.
    while (next_bucket < num_buckets_) reducer->Ready(w, next_bucket++);
    status.Update(reducer->Finish(w));
  }
  return status;
}

void StageExecutor::Discard(int microbatch) {
  if (in_flight_.erase(microbatch) == 0) return;
  // A follower's failure shows in the next call that returns a Status.
  Mirrored([&](int) { return RankCall{.op = RankOp::kDiscard, .microbatch = microbatch}; },
           [&] {
             return OnWorkers([&](int w) {
               workers_[w].stage->Discard(microbatch);
               return absl::OkStatus();
             });
           })
      .IgnoreError();
}

void StageExecutor::ZeroGrad(int64_t step) {
  Mirrored([&](int) { return RankCall{.op = RankOp::kZeroGrad, .step = step}; },
           [&] {
             return OnWorkers([&](int w) {
               workers_[w].history->ZeroGrads(step);
               return absl::OkStatus();
             });
           })
      .IgnoreError();
}

absl::StatusOr<double> StageExecutor::GradSumSquares(double downstream, int64_t step) {
  if (tensor_parallel_ == 1 || peers_ == nullptr) {
    return FromWorker0<double>([&](const Worker& w) {
      return w.stage->GradSumSquares(w.history->grads(step), downstream);
    });
  }
  // The split parameters' sums of every tensor rank of the leader's replica, in rank order, then
  // the replicated parameters once.
  for (int r = 1; r < tensor_parallel_; ++r) {
    STRAIT_RETURN_IF_ERROR(peers_->Send(r, {.op = RankOp::kGradSumSquares, .step = step}));
  }
  const Worker& w = workers_[0];
  absl::StatusOr<double> sum = w.stage->GradSumSquaresOf(w.history->grads(step), downstream, true);
  for (int r = 1; r < tensor_parallel_; ++r) {
    absl::StatusOr<RankResult> part = peers_->Await(r);
    if (!part.ok()) return part.status();
    if (sum.ok()) *sum += part->sum;
  }
  if (!sum.ok()) return sum;
  return w.stage->GradSumSquaresOf(w.history->grads(step), *sum, false);
}

absl::StatusOr<std::vector<float>> StageExecutor::TiedGrad(int64_t step) const {
  return FromWorker0<std::vector<float>>(
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

absl::Status StageExecutor::ScaleGrads(int64_t step, LayerRange layers, float factor) {
  const LayerRange own = range();
  if (layers.start < own.start || layers.end > own.end || layers.start > layers.end) {
    return absl::InvalidArgumentError(absl::StrCat("ScaleGrads of layers [", layers.start, ", ",
                                                   layers.end, ") on a stage of layers [",
                                                   own.start, ", ", own.end, ")"));
  }
  const std::vector<int64_t>& offsets = stage(0).layer_offsets();
  const int64_t begin = offsets[layers.start - own.start], end = offsets[layers.end - own.start];
  if (end == begin) return absl::OkStatus();
  auto call = [&](int) {
    return RankCall{.op = RankOp::kScaleGrads,
                    .step = step,
                    .scale = factor,
                    .layer_start = layers.start,
                    .layer_end = layers.end};
  };
  return Mirrored(call, [&] {
    return OnWorkers([&](int w) -> absl::Status {
      Worker& worker = workers_[w];
      float* grads = worker.history->grads(step) + begin;
      // factor * g + 0 * g: exactly factor * g (the zero product adds nothing) on every backend.
      worker.backend->Axpby(end - begin, factor, grads, 0.0f, grads);
      return worker.backend->Sync();
    });
  });
}

absl::Status StageExecutor::AddTiedGrad(int64_t step, absl::Span<const float> other) {
  auto call = [&](int) {
    RankCall c{.op = RankOp::kAddTiedGrad, .step = step};
    c.values.assign(other.begin(), other.end());
    return c;
  };
  return Mirrored(call, [&] { return AddTiedGradLocally(step, other); });
}

absl::Status StageExecutor::AddTiedGradLocally(int64_t step, absl::Span<const float> other) {
  return OnWorkers([&](int w) -> absl::Status {
    Worker& worker = workers_[w];
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

absl::Status StageExecutor::TieLocalGrads(int64_t step) {
  // Called every step whatever the model: without both copies, no dispatch to the workers.
  if (stage(0).tied_offsets().size() != 2) return absl::OkStatus();
  return Mirrored([&](int) { return RankCall{.op = RankOp::kTieLocalGrads, .step = step}; },
                  [&] {
                    return OnWorkers([&](int w) -> absl::Status {
                      Worker& worker = workers_[w];
                      const Stage& stage = *worker.stage;
                      float* grads = worker.history->grads(step);
                      float* embed = grads + stage.tied_offsets()[0];
                      float* head = grads + stage.tied_offsets()[1];
                      worker.backend->Axpy(stage.tied_numel(), 1.0f, head, embed);
                      worker.backend->CopyOnDevice(head, embed, sizeof(float) * stage.tied_numel());
                      return absl::OkStatus();
                    });
                  });
}

absl::Status StageExecutor::OptimizerStep(int64_t step, float grad_scale) {
  const WeightHistory& h = history(0);
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
  auto call = [&](int) {
    return RankCall{.op = RankOp::kOptimizerStep, .step = step, .scale = grad_scale};
  };
  return Mirrored(call, [&] {
    return OnWorkers([&](int w) {
      Worker& worker = workers_[w];
      return worker.history->Update(step, *worker.optimizer, grad_scale);
    });
  });
}

absl::StatusOr<std::vector<float>> StageExecutor::Params() const {
  return Whole(ShardedState::kParams, 0);
}

absl::StatusOr<std::vector<float>> StageExecutor::PreviousParams() const {
  return Whole(ShardedState::kPrevious, 0);
}

absl::StatusOr<std::vector<float>> StageExecutor::LookaheadParams() const {
  return Whole(ShardedState::kLookahead, 0);
}

absl::StatusOr<std::vector<float>> StageExecutor::Grads(int64_t step) const {
  return Whole(ShardedState::kGrads, step);
}

absl::StatusOr<std::vector<float>> StageExecutor::OptimizerState() const {
  return Whole(ShardedState::kOptimizer, 0);
}

absl::StatusOr<std::vector<float>> StageExecutor::Local(ShardedState which, int64_t step) const {
  return FromWorker0<std::vector<float>>(
      [which, step](const Worker& w) -> absl::StatusOr<std::vector<float>> {
        switch (which) {
          case ShardedState::kParams:
            return w.history->Newest();
          case ShardedState::kPrevious:
            return w.history->Previous();
          case ShardedState::kLookahead:
            return w.history->Lookahead();
          case ShardedState::kGrads:
            return w.history->Grads(step);
          case ShardedState::kOptimizer:
            break;
        }
        std::vector<float> out(w.optimizer->state_floats());
        w.backend->CopyToHost(out.data(), w.optimizer->state(), sizeof(float) * out.size());
        STRAIT_RETURN_IF_ERROR(w.backend->Sync());
        return out;
      });
}

absl::Status StageExecutor::SetParams(absl::Span<const float> params) {
  auto call = [&](int rank) {
    RankCall c{.op = RankOp::kSetParams};
    c.values = ShardsFor(params, rank);
    return c;
  };
  std::vector<float> storage;
  const absl::Span<const float> own = OwnShards(params, storage);
  return Mirrored(
      call, [&] { return OnWorkers([&](int w) { return workers_[w].history->SetNewest(own); }); });
}

absl::Status StageExecutor::SetGrads(int64_t step, absl::Span<const float> grads) {
  if (ranks_ > 1) {
    return absl::FailedPreconditionError("SetGrads on a site of several ranks");
  }
  if (static_cast<int64_t>(grads.size()) != param_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetGrads: ", grads.size(), " floats for a stage of ", param_count()));
  }
  return OnWorkers([&](int w) -> absl::Status {
    Worker& worker = workers_[w];
    worker.backend->CopyToDevice(worker.history->grads(step), grads.data(),
                                 sizeof(float) * grads.size());
    return worker.backend->Sync();
  });
}

absl::Status StageExecutor::RestoreWeights(int64_t version, absl::Span<const float> newest,
                                           absl::Span<const float> previous,
                                           absl::Span<const float> lookahead) {
  auto call = [&](int rank) {
    RankCall c{.op = RankOp::kRestoreWeights, .weights = version};
    c.values = ShardsFor(newest, rank);
    c.previous = ShardsFor(previous, rank);
    c.lookahead = ShardsFor(lookahead, rank);
    return c;
  };
  std::vector<float> storage[3];
  const absl::Span<const float> own_newest = OwnShards(newest, storage[0]),
                                own_previous = OwnShards(previous, storage[1]),
                                own_lookahead = OwnShards(lookahead, storage[2]);
  return Mirrored(call, [&] {
    return OnWorkers([&](int w) {
      return workers_[w].history->Restore(version, own_newest, own_previous, own_lookahead);
    });
  });
}

absl::Status StageExecutor::SetOptimizerState(absl::Span<const float> state) {
  auto call = [&](int rank) {
    RankCall c{.op = RankOp::kSetOptimizerState};
    c.values = ShardsFor(state, rank);
    return c;
  };
  std::vector<float> storage;
  const absl::Span<const float> own = OwnShards(state, storage);
  return Mirrored(call, [&] { return SetOptimizerStateLocally(own); });
}

absl::Status StageExecutor::SetOptimizerStateLocally(absl::Span<const float> state) {
  return OnWorkers([&](int w) -> absl::Status {
    const Worker& worker = workers_[w];
    if (static_cast<int64_t>(state.size()) != worker.optimizer->state_floats()) {
      return absl::InvalidArgumentError(absl::StrCat("SetOptimizerState: ", state.size(),
                                                     " floats for an optimizer state of ",
                                                     worker.optimizer->state_floats()));
    }
    worker.backend->CopyToDevice(worker.optimizer->state(), state.data(),
                                 sizeof(float) * state.size());
    return worker.backend->Sync();
  });
}

}  // namespace strait::site
