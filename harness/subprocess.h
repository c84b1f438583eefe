// Child processes for the tools (demo, benchmarks) and the integration tests: start an executable
// with arguments, its output captured to a log file, wait for a "ready file" it writes, and always
// stop it (SIGTERM, then SIGKILL) when the Process goes out of scope.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace strait::harness {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction unless Keep()
// was called (to leave logs behind for a failed run).
class TempDir {
 public:
  TempDir();
  // `path` itself (made if missing), kept on destruction: a work directory the user named.
  explicit TempDir(const std::string& path);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  void Keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// The path of another Strait executable (`strait-gateway`, `strait-site`, `strait`): beside the
// running one (an installation), or in its folder of the build tree. Empty when not found.
std::string FindStraitExecutable(const std::string& name);

class Process {
 public:
  // Starts `argv[0]` (a path) with the arguments; stdout and stderr go to `log_file`, replacing
  // what it held (or after it, with `append`: a restarted process's log keeps its earlier lives).
  // The child gets SIGTERM if the thread that made the Process exits, so make Processes on
  // long-lived threads.
  Process(std::vector<std::string> argv, std::string log_file, bool append = false);
  // Stops the process if it still runs.
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Waits until `file` exists and has a line "key=value" for every key, and returns those pairs;
  // empty on timeout or when the process exits first.
  std::map<std::string, std::string> WaitForReadyFile(const std::string& file,
                                                      const std::vector<std::string>& keys,
                                                      std::chrono::seconds timeout);
  // Sends `signal`; Wait() collects the exit.
  void Kill(int signal);
  // Waits for the exit; returns the exit code, or 128 + signal, or -1 on timeout.
  int Wait(std::chrono::seconds timeout);
  bool Running();
  // User plus system CPU seconds of the running process so far (Linux /proc); 0 once Wait() or
  // Running() saw it exit.
  double CpuSeconds() const;
  pid_t pid() const { return pid_; }
  // The last `bytes` of the log (for failure messages).
  std::string LogTail(size_t bytes = 4000) const;

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_file_;
};

}  // namespace strait::harness
