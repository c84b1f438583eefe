// SentencePiece behind an interface of std types only. Debian's libsentencepiece carries its own
// protobuf-lite 3.14 runtime and exports its symbols, which clash with the system protobuf (3.21)
// that gRPC brings into the same process: whichever the dynamic linker meets first serves both,
// and the other aborts. So SentencePiece lives in a module of its own, libstrait_sentencepiece.so
// (sentencepiece_module.cc, the only file that includes its headers), opened with RTLD_DEEPBIND
// so that it binds to its own copy. Errors are messages, empty when all went well.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strait::site::spm {

// A loaded model. Const methods are thread-safe.
class Model {
 public:
  virtual ~Model() = default;
  virtual int Size() const = 0;  // Pieces: the vocabulary.
  virtual std::string Encode(std::string_view text, std::vector<int>* ids) const = 0;
  virtual std::string Decode(const std::vector<int>& ids, std::string* text) const = 0;
  virtual std::string Piece(int id) const = 0;  // "▁the", "<0x0A>", "<unk>"
  virtual bool IsByte(int id) const = 0;
  virtual bool IsControl(int id) const = 0;
  virtual bool IsUnknown(int id) const = 0;
};

// What the module offers. Thread-safe.
class Library {
 public:
  // Parses a model file's contents into *model.
  virtual std::string Load(std::string_view serialized, std::unique_ptr<Model>* model) const = 0;
  // SentencePieceTrainer::Train with `args` (its flags, without "--") on the sentences `next`
  // hands out (false when there are no more); the model's serialized contents go to *model.
  virtual std::string Train(const std::unordered_map<std::string, std::string>& args,
                            const std::function<bool(std::string* sentence)>& next,
                            std::string* model) const = 0;

 protected:
  ~Library() = default;
};

// The module, opened once per process; null with *error set when it cannot be (missing, or a
// sanitizer build, whose runtime refuses RTLD_DEEPBIND). Thread-safe.
const Library* OpenLibrary(std::string* error);

}  // namespace strait::site::spm

// The module's one exported symbol.
extern "C" const strait::site::spm::Library* StraitSentencePieceLibrary();
