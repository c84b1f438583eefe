#include "site/data/dataset.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/data/fashion_mnist.h"
#include "site/data/synthetic.h"
#include "site/data/text_corpus.h"

namespace strait::site {

absl::StatusOr<Dataset> LoadDataset(const DataSpec& data, const ModelSpec& model, Split split) {
  if (data.kind == DatasetKind::kText) return LoadTextDataset(data, model.gpt, split);
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
  if (data.kind == DatasetKind::kText) return TextDatasetSize(data, model.gpt, split);
  if (data.kind == DatasetKind::kSynthetic) {
    return int64_t{split == Split::kTrain ? data.synthetic_train : data.synthetic_test};
  }
  return FashionMnistSize(data.path, split);
}

}  // namespace strait::site
