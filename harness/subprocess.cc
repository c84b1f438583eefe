#include "harness/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

namespace strait::harness {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/strait-XXXXXX";
  char* made = mkdtemp(pattern.data());
  path_ = made != nullptr ? made : "";
}

TempDir::TempDir(const std::string& path) : path_(path), keep_(true) {
  std::error_code ignored;
  std::filesystem::create_directories(path_, ignored);
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty() && !keep_) std::filesystem::remove_all(path_, ignored);
}

std::string FindStraitExecutable(const std::string& name) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  const std::filesystem::path dir = self.parent_path();
  for (const std::filesystem::path& candidate :
       {dir / name, dir.parent_path() / "gateway" / name, dir.parent_path() / "site" / name,
        dir.parent_path() / "tools" / name}) {
    if (std::filesystem::exists(candidate, error)) return candidate.string();
  }
  return "";
}

Process::Process(std::vector<std::string> argv, std::string log_file, bool append)
    : log_file_(std::move(log_file)) {
  pid_ = fork();
  if (pid_ == 0) {
    // Dies with its parent even when the parent cannot run destructors (a crashed test, kill -9).
    // The signal follows the forking *thread*: Processes are made on long-lived threads.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = open(log_file_.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

Process::~Process() {
  if (Running()) {
    Kill(SIGTERM);
    if (Wait(std::chrono::seconds(5)) == -1) {
      Kill(SIGKILL);
      Wait(std::chrono::seconds(5));
    }
  }
}

bool Process::Running() {
  if (pid_ <= 0 || exit_code_ != -1) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return true;
  if (r == pid_) exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return false;
}

double Process::CpuSeconds() const {
  if (pid_ <= 0 || exit_code_ != -1) return 0.0;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces, so it is skipped up to its last ')'):
  // state is field 3; utime and stime, in clock ticks, fields 14 and 15.
  const size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return 0.0;
  std::istringstream fields(stat.substr(name_end + 1));
  std::string skipped;
  for (int field = 3; field <= 13; ++field) fields >> skipped;
  unsigned long long user = 0, system = 0;
  if (!(fields >> user >> system)) return 0.0;
  return static_cast<double>(user + system) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

void Process::Kill(int signal) {
  if (Running()) kill(pid_, signal);
}

int Process::Wait(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Running()) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code_;
}

std::map<std::string, std::string> Process::WaitForReadyFile(const std::string& file,
                                                             const std::vector<std::string>& keys,
                                                             std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::map<std::string, std::string> values;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      size_t eq = line.find('=');
      if (eq != std::string::npos) values[line.substr(0, eq)] = line.substr(eq + 1);
    }
    bool all = true;
    for (const std::string& key : keys) all &= values.count(key) > 0;
    if (all) return values;
    if (!Running()) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

std::string Process::LogTail(size_t bytes) const {
  std::ifstream in(log_file_);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

}  // namespace strait::harness
