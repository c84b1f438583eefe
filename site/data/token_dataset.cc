#include "site/data/token_dataset.h"

#include <cmath>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/data/mapped_token_shards.h"
#include "site/data/token_windows.h"
#include "site/data/tokenizer.h"

namespace strait::site {
namespace {

std::string IndexPath(const DataSpec& data) {
  return (std::filesystem::path(data.path) / kTokenIndexFile).string();
}

// The windows of a split of `tokens` tokens, or an error like text_corpus's.
absl::StatusOr<int64_t> SplitWindows(const TokenSplit& s, int context, Split split,
                                     const std::string& index_path) {
  const int64_t tokens = s.end - s.begin;
  const int64_t windows = tokens > 0 ? (tokens - 1) / context : 0;
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        index_path, ": the ", split == Split::kTrain ? "training" : "validation",
        " split (documents ", s.first_document, " to ", s.end_document - 1, ") has ", tokens,
        " tokens, fewer than one window of ", context + 1,
        " (model.context + 1); use more text, a shorter context or another data.validation"));
  }
  return windows;
}

}  // namespace

absl::StatusOr<TokenSplit> SplitTokenDocuments(const TokenIndex& index, double validation,
                                               Split split, const std::string& index_path) {
  const std::vector<TokenDocument>& docs = index.documents;
  if (docs.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path,
                     ": the corpus is one document, but the held-out split (data.validation) is "
                     "whole documents at its end; prepare it from several --input files (e.g. "
                     "split the text with `split -n l/20`)"));
  }
  const double target = static_cast<double>(index.tokens) * validation;
  size_t cut = docs.size() - 1;  // At least the last document is held out.
  int64_t held = docs[cut].tokens;
  // Take one more document while that brings the held-out tokens closer to the target.
  while (cut > 1 && std::abs(static_cast<double>(held + docs[cut - 1].tokens) - target) <
                        std::abs(static_cast<double>(held) - target)) {
    held += docs[--cut].tokens;
  }
  TokenSplit s;
  if (split == Split::kTrain) {
    s.first_document = 0;
    s.end_document = cut;
  } else {
    s.first_document = cut;
    s.end_document = docs.size();
  }
  s.begin = docs[s.first_document].offset;
  s.end = docs[s.end_document - 1].offset + docs[s.end_document - 1].tokens;
  for (size_t k = s.first_document; k < s.end_document; ++k) s.bytes += docs[k].bytes;
  return s;
}

absl::StatusOr<TokenIndex> ReadCheckedTokenIndex(const DataSpec& data, const GptSpec& gpt) {
  const std::string path = IndexPath(data);
  STRAIT_ASSIGN_OR_RETURN(TokenIndex index, ReadTokenIndex(data.path));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(data, gpt));
  if (tokenizer->fingerprint() != index.tokenizer) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the shards were made by tokenizer '", index.tokenizer, "', but data.tokenizer (",
        data.tokenizer, ") is '", tokenizer->fingerprint(),
        "'; use the tokenizer they were prepared with, or prepare them again with this one"));
  }
  if (index.vocab != gpt.vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": vocab is ", index.vocab, " but model.vocab is ", gpt.vocab));
  }
  return index;
}

absl::StatusOr<Dataset> LoadTokenDataset(const DataSpec& data, const GptSpec& gpt, Split split) {
  const std::string path = IndexPath(data);
  STRAIT_ASSIGN_OR_RETURN(TokenIndex index, ReadCheckedTokenIndex(data, gpt));
  STRAIT_ASSIGN_OR_RETURN(const TokenSplit s,
                          SplitTokenDocuments(index, data.validation, split, path));
  STRAIT_ASSIGN_OR_RETURN(const int64_t windows, SplitWindows(s, gpt.context, split, path));
  STRAIT_ASSIGN_OR_RETURN(std::shared_ptr<const MappedTokenShards> shards,
                          MappedTokenShards::Open(data.path, index));
  Dataset d;
  d.size = windows;
  d.features = gpt.context;
  d.targets = gpt.context;
  d.classes = gpt.vocab;
  d.windows =
      std::make_shared<const TokenWindows>(std::move(shards), s.begin, windows, gpt.context);
  d.bytes_per_token = static_cast<double>(s.bytes) / static_cast<double>(s.end - s.begin);
  return d;
}

absl::StatusOr<int64_t> TokenDatasetSize(const DataSpec& data, const GptSpec& gpt, Split split) {
  const std::string path = IndexPath(data);
  STRAIT_ASSIGN_OR_RETURN(const TokenIndex index, ReadCheckedTokenIndex(data, gpt));
  STRAIT_ASSIGN_OR_RETURN(const TokenSplit s,
                          SplitTokenDocuments(index, data.validation, split, path));
  return SplitWindows(s, gpt.context, split, path);
}

}  // namespace strait::site
