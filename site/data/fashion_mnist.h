// Fashion-MNIST from the gzip IDX files of Debian's dataset-fashion-mnist package.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "site/data/dataset.h"

namespace strait::site {

// Pixel normalisation: x = (byte / 255 - kMean) / kStd, the training set's mean and std.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

// Reads dir/{train,t10k}-images-idx3-ubyte.gz and the matching labels file (features 784, classes
// 10). Missing or malformed files give an error naming the file and the package. Thread-safe.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// The number of samples of a split, from the labels file's header only. Thread-safe.
absl::StatusOr<int64_t> FashionMnistSize(const std::string& dir, Split split);

}  // namespace strait::site
