// Data sets (images and their classes, or windows of text and their next tokens), in memory or, for
// token shards, read through memory-mapped files: the first stage reads the inputs, the last stage
// the labels, both through GatherSamples.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"

namespace strait::site {

enum class Split { kTrain, kTest };

class TokenWindows;  // site/data/token_windows.h

struct Dataset {
  int64_t size = 0;
  int features = 0;  // Floats per sample (784 for 28x28 images, channels first).
  int classes = 0;
  int targets = 1;              // Labels per sample (ModelSpec::TargetsPerSample).
  std::vector<float> inputs;    // [size, features]
  std::vector<int32_t> labels;  // [size, targets], each in [0, classes)
  // Token shards (`format: tokens`): the samples, read on demand from mapped files; inputs and
  // labels stay empty. Shared by the copies of a Dataset; thread-safe.
  std::shared_ptr<const TokenWindows> windows;
  // Text: the UTF-8 bytes the labels stand for, per label (1 with byte tokens). Turns a loss in
  // nats per token into bits per byte.
  double bytes_per_token = 1.0;
};

// The data set of a job spec (`data:`), checked against the model's input size and classes.
// Blocks while reading files. Thread-safe.
absl::StatusOr<Dataset> LoadDataset(const DataSpec& data, const ModelSpec& model, Split split);

// Copies samples indices[0, n) of `data` into `inputs` ([n, features]) and `labels` ([n, targets]),
// resized; a null one is skipped (a middle stage reads neither, the first only inputs). Fails only
// for token shards: a damaged shard (a token outside the vocabulary), an index out of range.
absl::Status GatherSamples(const Dataset& data, const int64_t* indices, int n,
                           std::vector<float>* inputs, std::vector<int32_t>* labels);

// The number of samples of a split without loading it (a middle stage needs only the count to
// follow the evaluation batches). Thread-safe.
absl::StatusOr<int64_t> DatasetSize(const DataSpec& data, const ModelSpec& model, Split split);

}  // namespace strait::site
