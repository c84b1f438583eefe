// Trains a SentencePiece model on a UTF-8 text (`strait tokenizer train`), for `data.tokenizer`.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace strait::site {

struct TokenizerTrainOptions {
  std::string input;         // A UTF-8 text file.
  std::string out;           // The model file to write (exactly this path).
  int vocab = 4096;          // Tokens, 256 byte tokens and <unk> included.
  std::string type = "bpe";  // "bpe" or "unigram".
  // Share of the text's characters that get a token of their own; the rest are spelt in bytes.
  double character_coverage = 1.0;
  int threads = 1;
  bool verbose = false;  // SentencePiece's own log on stderr.
};

struct TokenizerTrainResult {
  int vocab = 0;
  int64_t bytes = 0;   // Of the input.
  int64_t tokens = 0;  // The input, encoded with the new model.
  double train_seconds = 0;
};

// The smallest and largest --vocab: the 256 byte tokens, <unk> and a few pieces; model.vocab's
// ceiling.
inline constexpr int kMinTokenizerVocab = 260;
inline constexpr int kMaxTokenizerVocab = 1 << 20;

// Trains a model whose encoding round-trips any UTF-8 text exactly: no normalisation, spaces and
// newlines kept, bytes the pieces do not cover spelt as byte tokens (byte fallback), no <s> or
// </s>. It learns from the input's lines, newline included. Writes `out` atomically. Errors name
// the input (missing, not UTF-8 with the offset of the first bad byte, empty) or say what to
// change (a vocabulary too small for the text's characters, or too large for it); Unavailable
// where SentencePiece cannot be loaded. Blocks; uses `threads` threads.
absl::StatusOr<TokenizerTrainResult> TrainTokenizer(const TokenizerTrainOptions& options);

}  // namespace strait::site
