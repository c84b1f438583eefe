#include "site/data/dataset.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/data/fashion_mnist.h"
#include "site/data/synthetic.h"
#include "site/data/text_corpus.h"
#include "site/data/token_dataset.h"
#include "site/data/token_windows.h"

namespace strait::site {

absl::StatusOr<Dataset> LoadDataset(const DataSpec& data, const ModelSpec& model, Split split) {
  if (data.kind == DatasetKind::kText) {
    return data.format == DataFormat::kTokens ? LoadTokenDataset(data, model.gpt, split)
                                              : LoadTextDataset(data, model.gpt, split);
  }
  if (data.kind == DatasetKind::kSynthetic) {
    const int64_t size = split == Split::kTrain ? data.synthetic_train : data.synthetic_test;
    return MakeSyntheticDataset(data.seed, split, size, model.InputFeatures(), model.Classes());
  }
  STRAIT_ASSIGN_OR_RETURN(Dataset d, LoadFashionMnist(data.path, split));
  if (d.features != model.InputFeatures() || d.classes != model.Classes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model takes ", model.InputFeatures(), " input features and ", model.Classes(),
        " classes, but Fashion-MNIST has ", d.features, " (28x28 images) and ", d.classes));
  }
  return d;
}

absl::StatusOr<int64_t> DatasetSize(const DataSpec& data, const ModelSpec& model, Split split) {
  if (data.kind == DatasetKind::kText) {
    return data.format == DataFormat::kTokens ? TokenDatasetSize(data, model.gpt, split)
                                              : TextDatasetSize(data, model.gpt, split);
  }
  if (data.kind == DatasetKind::kSynthetic) {
    return int64_t{split == Split::kTrain ? data.synthetic_train : data.synthetic_test};
  }
  return FashionMnistSize(data.path, split);
}

absl::Status GatherSamples(const Dataset& data, const int64_t* indices, int n,
                           std::vector<float>* inputs, std::vector<int32_t>* labels) {
  if (inputs != nullptr) inputs->resize(static_cast<size_t>(n) * data.features);
  if (labels != nullptr) labels->resize(static_cast<size_t>(n) * data.targets);
  if (data.windows != nullptr) {
    for (int i = 0; i < n; ++i) {
      STRAIT_RETURN_IF_ERROR(data.windows->Read(
          indices[i], inputs != nullptr ? inputs->data() + int64_t{i} * data.features : nullptr,
          labels != nullptr ? labels->data() + int64_t{i} * data.targets : nullptr));
    }
    return absl::OkStatus();
  }
  for (int i = 0; i < n; ++i) {
    if (inputs != nullptr) {
      std::copy_n(data.inputs.begin() + indices[i] * data.features, data.features,
                  inputs->begin() + int64_t{i} * data.features);
    }
    if (labels != nullptr) {
      std::copy_n(data.labels.begin() + indices[i] * data.targets, data.targets,
                  labels->begin() + int64_t{i} * data.targets);
    }
  }
  return absl::OkStatus();
}

}  // namespace strait::site
