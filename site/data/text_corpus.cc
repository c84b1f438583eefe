#include "site/data/text_corpus.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/base/thread_annotations.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status.h"

namespace strait::site {
namespace {

// Tokens [begin, end) of a split: the training split is the head, the validation split the tail.
std::pair<int64_t, int64_t> SplitRange(int64_t tokens, double validation, Split split) {
  const int64_t held_out =
      static_cast<int64_t>(std::llround(static_cast<double>(tokens) * validation));
  const int64_t cut = tokens - held_out;
  return split == Split::kTrain ? std::pair{int64_t{0}, cut} : std::pair{cut, tokens};
}

int64_t Windows(int64_t tokens, int context) { return tokens > 0 ? (tokens - 1) / context : 0; }

const char* SplitName(Split split) { return split == Split::kTrain ? "training" : "validation"; }

}  // namespace

int64_t FirstInvalidUtf8(absl::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const int64_t n = static_cast<int64_t>(text.size());
  for (int64_t i = 0; i < n;) {
    if (i + 8 <= n) {  // Eight ASCII bytes at a time.
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned c = s[i];
    int length = 0;
    unsigned low = 0x80, high = 0xBF;  // Range of the second byte.
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + length > n) return i;
    if (s[i + 1] < low || s[i + 1] > high) return i;
    for (int k = 2; k < length; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    }
    i += length;
  }
  return -1;
}

absl::StatusOr<std::string> ReadUtf8File(const std::string& path, absl::string_view what) {
  if (std::error_code error; std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a directory, not a text file (", what,
        "); token shards that `strait data prepare` wrote are read with data.format: tokens"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open the text file (", what, "); check the path"));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  if (const int64_t bad = FirstInvalidUtf8(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not UTF-8 text (byte ", bad,
        " starts no valid character); convert it first, e.g. iconv -f LATIN1 -t UTF-8"));
  }
  return text;
}

absl::StatusOr<std::vector<int32_t>> ReadByteTokens(const std::string& path) {
  STRAIT_ASSIGN_OR_RETURN(const std::string text, ReadUtf8File(path, "data.path"));
  return MakeByteTokenizer()->Encode(text);
}

absl::StatusOr<std::shared_ptr<const TextTokens>> TokenizeTextFile(const DataSpec& data,
                                                                   const GptSpec& gpt) {
  STRAIT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer, LoadTokenizer(data, gpt));
  STRAIT_ASSIGN_OR_RETURN(const std::string text, ReadUtf8File(data.path, "data.path"));
  // One entry per process, never freed (a site's data set lives as long as the process anyway).
  struct Memo {
    absl::Mutex mutex;
    std::string key ABSL_GUARDED_BY(mutex);
    std::shared_ptr<const TextTokens> tokens ABSL_GUARDED_BY(mutex);
  };
  static Memo* const memo = new Memo;
  const bool keep = data.tokenizer != "bytes";  // Bytes are cheap to redo.
  const std::string key = absl::StrCat(tokenizer->fingerprint(), " ", text.size(), " ",
                                       absl::Hash<std::string>()(text), " ", data.path);
  if (keep) {
    absl::MutexLock lock(&memo->mutex);
    if (memo->tokens != nullptr && memo->key == key) return memo->tokens;
  }
  auto tokens = std::make_shared<TextTokens>();
  STRAIT_ASSIGN_OR_RETURN(tokens->ids, tokenizer->Encode(text));
  tokens->tokenizer = std::move(tokenizer);
  if (keep) {
    absl::MutexLock lock(&memo->mutex);
    memo->key = key;
    memo->tokens = tokens;
  }
  return std::shared_ptr<const TextTokens>(std::move(tokens));
}

absl::StatusOr<Dataset> MakeTextWindows(const std::vector<int32_t>& tokens, double validation,
                                        const GptSpec& gpt, Split split) {
  const auto [begin, end] = SplitRange(static_cast<int64_t>(tokens.size()), validation, split);
  const int t = gpt.context;
  Dataset d;
  d.size = Windows(end - begin, t);
  if (d.size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", SplitName(split), " split has ", end - begin, " tokens, fewer than one window of ",
        t + 1,
        " (model.context + 1); use more text, a shorter context or another data.validation"));
  }
  d.features = t;
  d.classes = gpt.vocab;
  d.targets = t;
  d.inputs.resize(static_cast<size_t>(d.size) * t);
  d.labels.resize(static_cast<size_t>(d.size) * t);
  for (int64_t i = 0; i < d.size * t; ++i) {
    const int32_t token = tokens[begin + i], next = tokens[begin + i + 1];
    if (token < 0 || token >= gpt.vocab || next < 0 || next >= gpt.vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", token < 0 || token >= gpt.vocab ? token : next, " at position ",
                       begin + i, " is not in the model's vocabulary [0, ", gpt.vocab, ")"));
    }
    d.inputs[i] = static_cast<float>(token);
    d.labels[i] = next;
  }
  return d;
}

absl::StatusOr<Dataset> LoadTextDataset(const DataSpec& data, const GptSpec& gpt, Split split) {
  STRAIT_ASSIGN_OR_RETURN(std::shared_ptr<const TextTokens> tokens, TokenizeTextFile(data, gpt));
  absl::StatusOr<Dataset> d = MakeTextWindows(tokens->ids, data.validation, gpt, split);
  if (!d.ok())
    return absl::Status(d.status().code(), absl::StrCat(data.path, ": ", d.status().message()));
  // What the loss is measured on: the labels, as UTF-8 bytes (bits per byte).
  int64_t bytes = 0;
  for (int32_t label : d->labels) bytes += tokens->tokenizer->TokenBytes(label);
  d->bytes_per_token = static_cast<double>(bytes) / static_cast<double>(d->labels.size());
  return d;
}

absl::StatusOr<int64_t> TextDatasetSize(const DataSpec& data, const GptSpec& gpt, Split split) {
  int64_t tokens = 0;
  if (data.tokenizer == "bytes") {
    std::error_code error;
    const auto bytes = std::filesystem::file_size(data.path, error);
    if (error) {
      return absl::NotFoundError(
          absl::StrCat(data.path, ": cannot read the text file (data.path): ", error.message()));
    }
    tokens = static_cast<int64_t>(bytes);
  } else {
    STRAIT_ASSIGN_OR_RETURN(std::shared_ptr<const TextTokens> t, TokenizeTextFile(data, gpt));
    tokens = static_cast<int64_t>(t->ids.size());
  }
  const auto [begin, end] = SplitRange(tokens, data.validation, split);
  return Windows(end - begin, gpt.context);
}

}  // namespace strait::site
