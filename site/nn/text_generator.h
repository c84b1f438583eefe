// Sampling text from a trained GPT (`strait generate`): the whole model. While the text fits the
// context, positions go through a key/value-cached decoder (site/nn/kv_decoder.h: a new token costs
// one position); past it, each token is a forward of the window of the last `context` tokens on
// the backend (positions are absolute, so a sliding window cannot reuse a cache).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/nn/kv_decoder.h"
#include "site/nn/stage.h"

namespace strait::site {

struct SamplingOptions {
  double temperature = 0.8;  // 0: always the most likely token.
  int top_k = 40;            // Sample among the k most likely tokens; 0: all of them.
  uint64_t seed = 1;         // Same seed, model and prompt: the same text.
};

class TextGenerator {
 public:
  // `params`: the whole model's parameters in layout order (Stage::InitialParams' order).
  static absl::StatusOr<std::unique_ptr<TextGenerator>> Create(const ModelSpec& model,
                                                               const std::vector<float>& params,
                                                               std::unique_ptr<Backend> backend);
  ~TextGenerator();

  // The logits of the token after `tokens` (at least one; the model sees the last `context`).
  absl::StatusOr<std::vector<float>> NextLogits(absl::Span<const int32_t> tokens);

  // `prompt` followed by `count` sampled tokens.
  absl::StatusOr<std::vector<int32_t>> Generate(std::vector<int32_t> prompt, int count,
                                                const SamplingOptions& options);

 private:
  TextGenerator() = default;
  ModelSpec model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stage> stage_;
  DeviceBuffer weights_, grads_;
  std::vector<LayerParams> views_;
  std::vector<const LayerParams*> view_pointers_;
  std::unique_ptr<KvDecoder> decoder_;
};

// Picks a token from `logits` with `options` (temperature, top-k); `draw` in [0, 1) is the random
// number that decides. Deterministic.
int32_t SampleToken(const std::vector<float>& logits, const SamplingOptions& options, double draw);

}  // namespace strait::site
