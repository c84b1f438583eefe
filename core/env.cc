#include "core/env.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"

namespace strait {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(e)));
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoError("cannot write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open directory", dir);
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced ? absl::OkStatus() : ErrnoError("cannot fsync directory", dir);
}

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      if (!std::filesystem::exists(path))
        return absl::NotFoundError(absl::StrCat("no file ", path));
      return ErrnoError("cannot open", path);
    }
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return ErrnoError("cannot read", path);
    return data;
  }

  absl::Status WriteFileAtomically(const std::string& path, absl::string_view data) override {
    const std::string dir = DirectoryOf(path);
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) return absl::InternalError(absl::StrCat("cannot make ", dir, ": ", error.message()));
    const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("cannot create", tmp);
    absl::Status status = WriteAll(fd, data, tmp);
    if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot fsync", tmp);
    if (::close(fd) != 0 && status.ok()) status = ErrnoError("cannot close", tmp);
    if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      status = ErrnoError("cannot rename to " + path + ":", tmp);
    }
    if (!status.ok()) {
      ::unlink(tmp.c_str());
      return status;
    }
    return SyncDirectory(dir);
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) == 0) return SyncDirectory(DirectoryOf(to));
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no file ", from));
    return ErrnoError("cannot rename to " + to + ":", from);
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
    return ErrnoError("cannot remove", path);
  }

  bool FileExists(const std::string& path) override {
    std::error_code error;
    return std::filesystem::exists(path, error);
  }

  absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) override {
    std::vector<std::string> names;
    std::error_code error;
    if (!std::filesystem::exists(dir, error)) return names;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      if (entry.is_regular_file(error)) names.push_back(entry.path().filename().string());
    }
    if (error) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", error.message()));
    std::sort(names.begin(), names.end());
    return names;
  }

  Clock::time_point Now() override { return Clock::now(); }
  void SleepFor(Clock::duration duration) override { std::this_thread::sleep_for(duration); }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* const env = new PosixEnv();
  return env;
}

}  // namespace strait
