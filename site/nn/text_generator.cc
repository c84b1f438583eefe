#include "site/nn/text_generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/counter_rng.h"

namespace strait::site {

absl::StatusOr<std::unique_ptr<TextGenerator>> TextGenerator::Create(
    const ModelSpec& model, const std::vector<float>& params, std::unique_ptr<Backend> backend) {
  if (!model.IsLanguageModel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text generation needs a language model (gpt, llama), not ", ToString(model.family)));
  }
  std::unique_ptr<TextGenerator> g(new TextGenerator());
  g->model_ = model;
  g->backend_ = std::move(backend);
  STRAIT_ASSIGN_OR_RETURN(g->stage_,
                          Stage::Create(model, {0, model.NumLayers()}, 1, g->backend_.get()));
  const int64_t count = g->stage_->param_count();
  if (static_cast<int64_t>(params.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoints hold ", params.size(), " parameters; the job spec's model has ", count));
  }
  STRAIT_ASSIGN_OR_RETURN(g->weights_,
                          DeviceBuffer::Create(g->backend_.get(), sizeof(float) * count));
  STRAIT_ASSIGN_OR_RETURN(g->grads_,
                          DeviceBuffer::Create(g->backend_.get(), sizeof(float) * count));
  g->backend_->CopyToDevice(g->weights_.f32(), params.data(), sizeof(float) * count);
  g->views_ = g->stage_->Views(g->weights_.f32(), g->grads_.f32());
  for (const LayerParams& v : g->views_) g->view_pointers_.push_back(&v);
  STRAIT_RETURN_IF_ERROR(g->backend_->Sync());
  STRAIT_ASSIGN_OR_RETURN(g->decoder_, KvDecoder::Create(model, {0, model.NumLayers()}, params));
  return g;
}

TextGenerator::~TextGenerator() = default;

absl::StatusOr<std::vector<float>> TextGenerator::NextLogits(absl::Span<const int32_t> tokens) {
  if (tokens.empty()) return absl::InvalidArgumentError("generation needs at least one token");
  const int t = model_.gpt.context, vocab = model_.gpt.vocab;
  const size_t seen = std::min<size_t>(tokens.size(), t);
  // Causal attention: the positions after the last token do not change its logits.
  std::vector<float> window(t, 0.0f);
  for (size_t i = 0; i < seen; ++i) {
    window[i] = static_cast<float>(tokens[tokens.size() - seen + i]);
  }
  std::vector<float> logits(static_cast<size_t>(t) * vocab);
  STRAIT_RETURN_IF_ERROR(
      stage_->Forward(0, 1, window.data(), logits.data(), view_pointers_, {.training = false}));
  stage_->Discard(0);
  return std::vector<float>(logits.begin() + (seen - 1) * vocab, logits.begin() + seen * vocab);
}

absl::StatusOr<std::vector<int32_t>> TextGenerator::Generate(std::vector<int32_t> prompt, int count,
                                                             const SamplingOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("generation needs at least one token");
  const size_t context = static_cast<size_t>(model_.gpt.context);
  decoder_->Reset();
  std::vector<float> logits;
  for (int i = 0; i < count; ++i) {
    if (prompt.size() <= context) {
      // The positions the cache lacks: the prompt at first, then the token sampled last.
      while (static_cast<size_t>(decoder_->position()) < prompt.size()) {
        STRAIT_ASSIGN_OR_RETURN(logits,
                                decoder_->Step({static_cast<float>(prompt[decoder_->position()])}));
      }
    } else {
      STRAIT_ASSIGN_OR_RETURN(logits, NextLogits(prompt));
    }
    prompt.push_back(SampleToken(logits, options, CounterUniform(options.seed, i)));
  }
  return prompt;
}

int32_t SampleToken(const std::vector<float>& logits, const SamplingOptions& options, double draw) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties keep the lower id, so the order is the same everywhere.
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (options.temperature <= 0.0) return order.front();
  const size_t k = options.top_k > 0 ? std::min<size_t>(options.top_k, order.size()) : order.size();
  std::vector<double> p(k);
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp((logits[order[i]] - logits[order[0]]) / options.temperature);
    sum += p[i];
  }
  double cumulative = 0.0;
  for (size_t i = 0; i < k; ++i) {
    cumulative += p[i] / sum;
    if (draw < cumulative) return order[i];
  }
  return order[k - 1];
}

}  // namespace strait::site
