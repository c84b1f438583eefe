#include "site/data/tokenizer.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "site/data/sentencepiece_api.h"

namespace strait::site {
namespace {

constexpr char kSpaceSymbol[] = "\xe2\x96\x81";  // U+2581, SentencePiece's stand-in for ' '.

// FNV-1a, 64 bits: a fingerprint, not a defence against anyone.
uint64_t Fnv1a(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class ByteTokenizer final : public Tokenizer {
 public:
  int vocab() const override { return 256; }
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override {
    return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= 256) return absl::InvalidArgumentError(absl::StrCat("no byte ", id));
      text.push_back(static_cast<char>(id));
    }
    return text;
  }
  int TokenBytes(int32_t) const override { return 1; }
  const std::string& fingerprint() const override { return fingerprint_; }

 private:
  const std::string fingerprint_ = "bytes";
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Takes the model file's path (for messages) and contents.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const std::string& path,
                                                           const std::string& contents) {
    std::string error;
    const spm::Library* library = spm::OpenLibrary(&error);
    if (library == nullptr) return absl::UnavailableError(absl::StrCat(path, ": ", error));
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer(path, contents));
    if (error = library->Load(contents, &t->model_); !error.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": not a SentencePiece model (", error,
          "); `strait tokenizer train --input TEXT --vocab N --out ", path, "` writes one"));
    }
    t->Measure();
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  int vocab() const override { return model_->Size(); }

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override {
    std::vector<int32_t> out;
    std::vector<int> ids;
    // SentencePiece's encoder slows down on one long string (the 4.3 MB Bible: 9 s whole, under
    // 2 s in pieces), so a text goes in chunks that end after a newline where the model allows it.
    const size_t chunk = line_chunks_ ? size_t{16} << 10 : text.size();
    for (size_t begin = 0; begin < text.size();) {
      size_t end = text.size();
      if (begin + chunk < text.size()) {
        const size_t newline = text.find('\n', begin + chunk);
        if (newline != absl::string_view::npos) end = newline + 1;
      }
      const std::string error =
          model_->Encode(std::string_view(text.data() + begin, end - begin), &ids);
      if (!error.empty()) return absl::InternalError(absl::StrCat(path_, ": encoding: ", error));
      out.insert(out.end(), ids.begin(), ids.end());
      begin = end;
    }
    return out;
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::vector<int> in(ids.begin(), ids.end());
    for (int id : in) {
      if (id < 0 || id >= vocab()) {
        return absl::InvalidArgumentError(
            absl::StrCat("token ", id, " is not in the vocabulary [0, ", vocab(), ") of ", path_));
      }
    }
    std::string text;
    const std::string error = model_->Decode(in, &text);
    if (!error.empty()) return absl::InternalError(absl::StrCat(path_, ": decoding: ", error));
    return text;
  }

  int TokenBytes(int32_t id) const override { return token_bytes_[id]; }
  const std::string& fingerprint() const override { return fingerprint_; }

 private:
  SentencePieceTokenizer(const std::string& path, const std::string& contents)
      : path_(path),
        fingerprint_(absl::StrFormat("sentencepiece:%016x:%d", Fnv1a(contents), contents.size())) {}

  // What each token decodes to, and whether text may be encoded line by line.
  void Measure() {
    token_bytes_.resize(vocab());
    for (int id = 0; id < vocab(); ++id) {
      if (model_->IsControl(id)) {
        token_bytes_[id] = 0;
      } else if (model_->IsByte(id)) {
        token_bytes_[id] = 1;
      } else if (model_->IsUnknown(id)) {
        std::string text;
        token_bytes_[id] = model_->Decode({id}, &text).empty() ? static_cast<int>(text.size()) : 0;
      } else {
        token_bytes_[id] =
            static_cast<int>(absl::StrReplaceAll(model_->Piece(id), {{kSpaceSymbol, " "}}).size());
      }
    }
    // Encoding in chunks gives the ids of the whole text when a chunk's encoding is its text piece
    // for piece: no dummy prefix, no normalisation of spaces or newlines (true of the models that
    // `strait tokenizer train` writes; pieces never span a line, as it learns from lines).
    const std::string probe = "a  b\n  c\n";
    std::vector<int> ids;
    line_chunks_ = model_->Encode(probe, &ids).empty();
    std::string text;
    for (int id : ids) {
      const std::string piece = model_->Piece(id);
      if (model_->IsByte(id)) {  // "<0x41>"
        text.push_back(static_cast<char>(std::strtol(piece.c_str() + 3, nullptr, 16)));
      } else {
        line_chunks_ = line_chunks_ && !model_->IsUnknown(id) && !model_->IsControl(id);
        text += absl::StrReplaceAll(piece, {{kSpaceSymbol, " "}});
      }
    }
    line_chunks_ = line_chunks_ && text == probe;
  }

  const std::string path_;
  const std::string fingerprint_;
  std::unique_ptr<spm::Model> model_;
  std::vector<int> token_bytes_;  // [vocab]
  bool line_chunks_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path,
        ": cannot open the tokenizer model (data.tokenizer); check the path, or make it with "
        "`strait tokenizer train --input TEXT --vocab N --out ",
        path, "`"));
  }
  const std::string contents((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return SentencePieceTokenizer::Create(path, contents);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const DataSpec& data, const GptSpec& gpt) {
  if (data.tokenizer == "bytes") {
    if (gpt.vocab != 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte tokens need model.vocab 256, found ", gpt.vocab));
    }
    return MakeByteTokenizer();
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(data.tokenizer);
  if (!t.ok()) return t.status();
  if ((*t)->vocab() != gpt.vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        data.tokenizer, ": the tokenizer has a vocabulary of ", (*t)->vocab(),
        " tokens but model.vocab is ", gpt.vocab, "; set model.vocab: ", (*t)->vocab(),
        " (a new model), or retrain the tokenizer with `strait tokenizer train ... --vocab ",
        gpt.vocab, "`"));
  }
  return t;
}

}  // namespace strait::site
