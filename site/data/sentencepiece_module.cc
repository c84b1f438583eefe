// libstrait_sentencepiece.so: SentencePiece behind spm::Library (see sentencepiece_api.h). No
// abseil header here: SentencePiece's headers declare an absl::string_view of their own.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <ext/stdio_sync_filebuf.h>
#include <iostream>

#include "site/data/sentencepiece_api.h"

// Opened with RTLD_DEEPBIND, SentencePiece binds to the definitions in this module and its own
// dependencies before the process's. That is the point for protobuf, but an executable keeps
// copies (copy relocations) of the data it uses from libstdc++ and glibc, and the originals that
// SentencePiece would then bind to are never set up: std::cerr is never constructed (its log
// crashes) and __libc_single_threaded stays 1 once threads run (reference counts without atomics).
// This module defines them for SentencePiece: streams over the C streams, and "not single-threaded"
// (always atomic, which is always correct).
namespace {
__gnu_cxx::stdio_sync_filebuf<char> err_buf(stderr), out_buf(stdout), in_buf(stdin);
}  // namespace
namespace std {
ostream cerr(&err_buf);
ostream cout(&out_buf);
istream cin(&in_buf);
}  // namespace std
extern "C" {
char __libc_single_threaded = 0;
}

namespace strait::site::spm {
namespace {

// The message of `status` without the "./src/file.cc(123) [condition] " of SentencePiece's checks.
std::string Message(const sentencepiece::util::Status& status) {
  if (status.ok()) return "";
  std::string message = status.message();
  if (message.rfind("./src/", 0) == 0 || message.rfind("src/", 0) == 0) {
    const size_t end = message.find("] ");
    message = end == std::string::npos ? "" : message.substr(end + 2);
  }
  while (!message.empty() && (message.back() == ' ' || message.back() == '\n')) message.pop_back();
  return message.empty() ? "failed" : message;
}

class SentencePieceModel final : public Model {
 public:
  std::string Load(std::string_view serialized) {
    return Message(processor_.LoadFromSerializedProto(serialized));
  }
  int Size() const override { return processor_.GetPieceSize(); }
  std::string Encode(std::string_view text, std::vector<int>* ids) const override {
    return Message(processor_.Encode(text, ids));
  }
  std::string Decode(const std::vector<int>& ids, std::string* text) const override {
    return Message(processor_.Decode(ids, text));
  }
  std::string Piece(int id) const override { return processor_.IdToPiece(id); }
  bool IsByte(int id) const override { return processor_.IsByte(id); }
  bool IsControl(int id) const override { return processor_.IsControl(id); }
  bool IsUnknown(int id) const override { return processor_.IsUnknown(id); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

// Sentences from a callback, as SentencePieceTrainer reads them.
class Sentences final : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::function<bool(std::string*)>& next) : next_(next) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(&value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::function<bool(std::string*)>& next_;
  std::string value_;
  bool done_ = false;
};

class SentencePieceLibrary final : public Library {
 public:
  std::string Load(std::string_view serialized, std::unique_ptr<Model>* model) const override {
    auto m = std::make_unique<SentencePieceModel>();
    if (std::string error = m->Load(serialized); !error.empty()) return error;
    *model = std::move(m);
    return "";
  }
  std::string Train(const std::unordered_map<std::string, std::string>& args,
                    const std::function<bool(std::string*)>& next,
                    std::string* model) const override {
    Sentences sentences(next);
    return Message(sentencepiece::SentencePieceTrainer::Train(args, &sentences, model));
  }
};

}  // namespace
}  // namespace strait::site::spm

extern "C" __attribute__((visibility("default"))) const strait::site::spm::Library*
StraitSentencePieceLibrary() {
  static const strait::site::spm::SentencePieceLibrary library;
  return &library;
}
