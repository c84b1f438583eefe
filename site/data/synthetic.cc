#include "site/data/synthetic.h"

#include "site/backend/counter_rng.h"

namespace strait::site {

Dataset MakeSyntheticDataset(uint64_t seed, Split split, int64_t size, int features, int classes) {
  Dataset d;
  d.size = size;
  d.features = features;
  d.classes = classes;
  d.inputs.resize(size * features);
  d.labels.resize(size);
  const uint64_t proto_key = CombineKey(seed, 0x50524f54 /* "PROT" */);
  const uint64_t sample_key =
      CombineKey(CombineKey(seed, 0x53594e54 /* "SYNT" */), split == Split::kTrain ? 0 : 1);
  for (int64_t i = 0; i < size; ++i) {
    const uint64_t key = CombineKey(sample_key, i);
    const int32_t label = static_cast<int32_t>(CombineKey(key, ~0ull) % classes);
    d.labels[i] = label;
    const uint64_t class_key = CombineKey(proto_key, label);
    for (int f = 0; f < features; ++f) {
      // Prototype in [-1, 1) plus uniform noise in [-1, 1): separable, but not trivially.
      const float proto = 2.0f * CounterUniform(class_key, f) - 1.0f;
      const float noise = 2.0f * CounterUniform(key, f) - 1.0f;
      d.inputs[i * features + f] = proto + noise;
    }
  }
  return d;
}

}  // namespace strait::site
