// Opens libstrait_sentencepiece.so (see sentencepiece_api.h for why it is a module of its own).
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "site/data/sentencepiece_api.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STRAIT_SANITIZER_RUNTIME 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define STRAIT_SANITIZER_RUNTIME 1
#endif
#endif

namespace strait::site::spm {
namespace {

constexpr char kModuleName[] = "libstrait_sentencepiece.so";

// Where the build put it, else a lib/ folder beside the running executable or above it (a build
// tree moved as a whole).
std::vector<std::filesystem::path> Candidates() {
  std::vector<std::filesystem::path> paths = {STRAIT_SENTENCEPIECE_MODULE};
  std::error_code error;
  std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", error).parent_path();
  for (int up = 0; !error && up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
    paths.push_back(dir / kModuleName);
    paths.push_back(dir / "lib" / kModuleName);
    if (dir == dir.parent_path()) break;
  }
  return paths;
}

struct Opened {
  const Library* library = nullptr;
  std::string error;
};

Opened Open() {
#ifdef STRAIT_SANITIZER_RUNTIME
  return {nullptr,
          "SentencePiece tokenizers are not available in a sanitizer build (its runtime refuses "
          "the RTLD_DEEPBIND that keeps SentencePiece's protobuf apart from gRPC's); use "
          "'tokenizer: bytes' or a build without -DSTRAIT_SANITIZE"};
#else
  std::string tried;
  for (const std::filesystem::path& path : Candidates()) {
    std::error_code error;
    if (!std::filesystem::exists(path, error)) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      tried += std::string(tried.empty() ? "" : "; ") + dlerror();
      continue;
    }
    using Entry = const Library* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "StraitSentencePieceLibrary"));
    if (entry == nullptr) {
      tried += "; " + path.string() + ": no StraitSentencePieceLibrary";
      continue;
    }
    return {entry(), ""};  // Never closed: the process may use it until it exits.
  }
  return {nullptr, "cannot load " + std::string(kModuleName) +
                       ", SentencePiece's module (looked for the build's " +
                       std::string(STRAIT_SENTENCEPIECE_MODULE) +
                       ", then beside the executable and in lib/ beside or above it, e.g. "
                       "/usr/local/lib for /usr/local/bin)" +
                       (tried.empty() ? "" : ": " + tried)};
#endif
}

}  // namespace

const Library* OpenLibrary(std::string* error) {
  static std::once_flag once;
  static Opened* opened = nullptr;
  std::call_once(once, [] { opened = new Opened(Open()); });
  if (opened->library == nullptr) *error = opened->error;
  return opened->library;
}

}  // namespace strait::site::spm
