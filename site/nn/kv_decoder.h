// Incremental decoding of a language model's layers (gpt, llama) with a key/value cache (text
// generation and serving): the positions of one sequence go through layers [a, b) one at a time,
// each block keeping the keys and values of the positions before, so a new position costs one row
// through every layer plus its attention over the cached positions instead of a whole window's
// forward. Host fp32 arithmetic with the training forward's formulas (LayerNorm's epsilon, GELU's
// tanh, RMSNorm, the rotary angles: site/backend/op_math.h), so its logits agree with
// Stage::Forward's up to the order of float sums. Not thread-safe.
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
  // Layers `range` of `model` (gpt or llama) with `params`, those layers' parameters in layout
  // order (a checkpoint's, or the whole model's from InitialParams). INVALID_ARGUMENT on a count
  // that does not fit.
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
  KvDecoder(const ModelSpec& model, LayerRange range, int last_layer);
  bool llama() const { return family_ == ModelFamily::kLlama; }
  void RunBlock(Block& block, std::vector<float>& x);       // gpt's
  void RunLlamaBlock(Block& block, std::vector<float>& x);  // llama's
  void Attend(const Block& block, const float* q, int t, float* out) const;

  GptSpec gpt_;
  ModelFamily family_;
  LayerRange range_;
  int last_layer_;  // The model's LM head.
  std::vector<float> params_;
  const float* token_embed_ = nullptr;  // Layer 0's, when in range.
  const float* pos_embed_ = nullptr;    // gpt's only.
  std::vector<Block> blocks_;
  const float* head_ = nullptr;  // The head's parameters, when in range.
  int position_ = 0;
};

}  // namespace strait::site
