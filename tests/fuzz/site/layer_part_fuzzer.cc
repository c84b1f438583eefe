// The floats of a MOVE frame (site/nn/checkpoint_layers.h LayerPartFromFloats) come from another
// site: whatever they are, decoding returns a part or an error and never reads past them.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "site/nn/checkpoint_layers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strait::ModelSpec model;
  model.family = strait::ModelFamily::kMlp;
  model.mlp.input = 3;
  model.mlp.hidden = {2, 2};
  model.mlp.classes = 2;
  strait::site::CheckpointState like;  // Layers [0, 3) with 2bw and AdamW: 8 + 6 + 6 params.
  like.weight_versions = 2;
  like.params.assign(20, 0.5f);
  like.previous_params.assign(20, 0.25f);
  like.optimizer_state.assign(40, 0.0f);
  like.end_layer = 3;
  // The first two floats from the first two bytes, so that the fuzzer reaches the length checks.
  std::vector<float> floats;
  if (size >= 2) floats = {static_cast<float>(data[0] % 5), static_cast<float>(data[1] % 5)};
  for (size_t i = 2; i + 4 <= size; i += 4) {
    float f;
    std::memcpy(&f, data + i, 4);
    floats.push_back(f);
  }
  (void)strait::site::LayerPartFromFloats(floats, like, model);
  return 0;
}
