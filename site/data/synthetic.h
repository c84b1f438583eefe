// A generated, learnable classification data set for tests: no files needed.
#pragma once

#include <cstdint>

#include "site/data/dataset.h"

namespace strait::site {

// `size` samples of `features` floats in `classes` clusters: each sample is its class's
// prototype plus noise, all from counter-based hashes of (seed, split, index), so every process
// makes the same data. Thread-safe.
Dataset MakeSyntheticDataset(uint64_t seed, Split split, int64_t size, int features, int classes);

}  // namespace strait::site
