#include "site/data/tokenizer_trainer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/status.h"
#include "site/data/sentencepiece_api.h"
#include "site/data/text_corpus.h"
#include "site/data/tokenizer.h"

namespace strait::site {
namespace {

// SentencePiece skips sentences longer than its max_sentence_length: a longer line is cut into
// sentences of at most this many bytes, at a space where there is one.
constexpr size_t kMaxSentenceBytes = 4096;

// The lines of a text, each with its newline (so that the model learns pieces that end a line),
// as sentences for SentencePiece's trainer.
class Lines {
 public:
  explicit Lines(const std::string& text) : text_(text) {}
  bool Next(std::string* sentence) {
    if (begin_ >= text_.size()) return false;
    size_t end = text_.find('\n', begin_);
    end = end == std::string::npos ? text_.size() : end + 1;
    if (end - begin_ > kMaxSentenceBytes) {
      end = begin_ + kMaxSentenceBytes;
      const size_t space = text_.rfind(' ', end - 1);
      if (space != std::string::npos && space > begin_) {
        end = space + 1;
      } else {  // Not inside a character.
        while (end > begin_ + 1 && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
      }
    }
    sentence->assign(text_, begin_, end - begin_);
    begin_ = end;
    return true;
  }

 private:
  const std::string& text_;
  size_t begin_ = 0;
};

// SentencePiece's message in the words of our command line: what to change for the two a user
// meets (a vocabulary too small for the text's characters, or too large for the text), else its
// message without the source position and condition it starts with.
std::string InOurWords(const TokenizerTrainOptions& o, const std::string& message) {
  static const std::regex kTooSmall(R"(smaller than required_chars\. (\d+) vs (\d+))");
  static const std::regex kTooLarge(R"(Vocabulary size too high \((\d+)\)\. .* <= (\d+))");
  std::smatch m;
  if (std::regex_search(message, m, kTooSmall)) {
    return absl::StrCat("--vocab ", o.vocab, " is too small: the text's characters and the 257 ",
                        "fixed tokens (256 bytes, <unk>) need ", m[2].str(),
                        "; raise --vocab or lower --character-coverage");
  }
  if (std::regex_search(message, m, kTooLarge)) {
    return absl::StrCat("--vocab ", o.vocab, " is more than this text yields with --type ", o.type,
                        " (at most ", m[2].str(), "); lower --vocab or train on more text");
  }
  return message;
}

absl::Status WriteAtomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << contents;
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write the model there"));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write the model: ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerTrainResult> TrainTokenizer(const TokenizerTrainOptions& o) {
  if (o.vocab < kMinTokenizerVocab || o.vocab > kMaxTokenizerVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab ", o.vocab, " is outside [", kMinTokenizerVocab, ", ", kMaxTokenizerVocab,
        "]: a model has the 256 byte tokens, <unk> and pieces of its own"));
  }
  if (o.type != "bpe" && o.type != "unigram") {
    return absl::InvalidArgumentError(absl::StrCat("--type ", o.type, ": expected bpe or unigram"));
  }
  if (!(o.character_coverage > 0.0 && o.character_coverage <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--character-coverage ", o.character_coverage, ": expected (0, 1]"));
  }
  STRAIT_ASSIGN_OR_RETURN(const std::string text, ReadUtf8File(o.input, "--input"));
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.input, ": empty; a tokenizer learns from text"));
  }
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.type},
      {"vocab_size", absl::StrCat(o.vocab)},
      {"character_coverage", absl::StrCat(o.character_coverage)},
      {"byte_fallback", "true"},
      // Text in, the same text out: no Unicode normalisation, spaces and newlines as they are.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"max_sentence_length", absl::StrCat(2 * kMaxSentenceBytes)},
      {"num_threads", absl::StrCat(std::max(1, o.threads))},
      {"minloglevel", o.verbose ? "0" : "2"},  // 2: errors only (they come back as the Status).
  };
  std::string error;
  const spm::Library* library = spm::OpenLibrary(&error);
  if (library == nullptr) return absl::UnavailableError(error);
  Lines lines(text);
  std::string model;
  const auto start = std::chrono::steady_clock::now();
  error = library->Train(
      args, [&lines](std::string* sentence) { return lines.Next(sentence); }, &model);
  TokenizerTrainResult result;
  result.train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(o.input, ": no model trained: ", InOurWords(o, error)));
  }
  STRAIT_RETURN_IF_ERROR(WriteAtomically(o.out, model));
  // The summary: the new model read back as a user will, on its own input.
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadSentencePieceTokenizer(o.out));
  STRAIT_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, tokenizer->Encode(text));
  result.vocab = tokenizer->vocab();
  result.bytes = static_cast<int64_t>(text.size());
  result.tokens = static_cast<int64_t>(ids.size());
  return result;
}

}  // namespace strait::site
