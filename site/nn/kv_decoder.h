// Incremental decoding of a GPT's layers with a key/value cache (text generation and serving): the
// positions of one sequence go through layers [a, b) one at a time, each block keeping the keys and
// values of the positions before, so a new position costs one row through every layer plus its
// attention over the cached positions instead of a whole window's forward. Host fp32 arithmetic
// with the training forward's formulas (LayerNorm's epsilon, GELU's tanh: site/backend/op_math.h),
// so its logits agree with Stage::Forward's up to the order of float sums. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"

namespace strait::site {

class KvDecoder {
 public:
  // Layers `range` of `model` (family gpt) with `params`, those layers' parameters in layout order
  // (a checkpoint's, or the whole model's from InitialParams). INVALID_ARGUMENT on a count that
  // does not fit.
  static absl::StatusOr<std::unique_ptr<KvDecoder>> Create(const ModelSpec& model, LayerRange range,
                                                           std::vector<float> params);
  ~KvDecoder();

  // Positions decoded since the last Reset (the cache holds that many).
  int position() const { return position_; }
  // Forgets the sequence: the next Step is position 0.
  void Reset() { position_ = 0; }

  // Decodes position position() and caches it. `input`: the token id (one value) when the range
  // starts at the embedding, the residual stream row [dim] otherwise. Returns the logits [vocab]
  // when the range ends with the LM head, the residual row [dim] otherwise. FAILED_PRECONDITION
  // once the context is full; INVALID_ARGUMENT for an input of the wrong size or token id.
  absl::StatusOr<std::vector<float>> Step(absl::Span<const float> input);

 private:
  struct Block;
  KvDecoder(const GptSpec& gpt, LayerRange range, int last_layer);
  void RunBlock(Block& block, std::vector<float>& x);

  GptSpec gpt_;
  LayerRange range_;
  int last_layer_;  // The model's LM head.
  std::vector<float> params_;
  const float* token_embed_ = nullptr;  // Layer 0's, when in range.
  const float* pos_embed_ = nullptr;
  std::vector<Block> blocks_;
  const float* head_ = nullptr;  // ln.gamma, ln.beta, fc.weight, fc.bias, when in range.
  int position_ = 0;
};

}  // namespace strait::site
