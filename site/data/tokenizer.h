// Text <-> token ids for a language model (`data.tokenizer`): plain bytes (vocabulary 256) or a
// SentencePiece model file (BPE or unigram, e.g. from `strait tokenizer train`). The first stage
// encodes the corpus into inputs, the last stage into labels, `strait generate` encodes a prompt
// and decodes what the model writes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/job_spec.h"

namespace strait::site {

// Immutable once made; every method is thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids are in [0, vocab()).
  virtual int vocab() const = 0;
  // The ids of UTF-8 `text`. Never fails for UTF-8 text with a byte-fallback model; a model
  // without byte fallback maps what it cannot represent to its unknown token.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const = 0;
  // The text of `ids` (each in [0, vocab()), else an error). Bytes that form no UTF-8 character
  // (a sequence cut short) come out as U+FFFD with SentencePiece, as they are with bytes.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;
  // The UTF-8 bytes that token `id` (in [0, vocab())) stands for in decoded text: 1 for a byte
  // token, 0 for a control token. The sum over a split's tokens is its size in bytes, which turns
  // nats per token into bits per byte.
  virtual int TokenBytes(int32_t id) const = 0;
  // Identifies the tokenization: "bytes", or "sentencepiece:" and a hash of the model file. Equal
  // fingerprints encode every text alike.
  virtual const std::string& fingerprint() const = 0;
};

// One token per byte, vocabulary 256.
std::unique_ptr<Tokenizer> MakeByteTokenizer();

// Loads a SentencePiece model file. An error names the file: missing, unreadable, or not a model.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);

// The tokenizer of a text data set (`data.tokenizer`: "bytes" or a model's path), checked against
// the model: a vocabulary other than `gpt.vocab` is an InvalidArgument error that names the file,
// both sizes and what to change. Blocks while reading the model file.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const DataSpec& data, const GptSpec& gpt);

}  // namespace strait::site
