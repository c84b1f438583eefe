// `strait bench shards` (issue 47): token shards for corpora larger than memory.
//   1. `strait data prepare`'s rate: a generated text of --prepare-mib MiB (8 documents) to byte
//      token shards, MB of text per second (target 50).
//   2. A --gib GiB corpus of uint16 tokens (pseudo-random bytes, written directly as shards and an
//      index: 63 large documents and a small last one, the held-out split), then `strait train` on
//      a small GPT over it for --steps steps: the seconds from starting the process to its first
//      step's progress line (target 5) and the process's peak resident memory (target 1 GiB).
// Both corpora are removed at the end unless --keep.
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "core/status.h"
#include "harness/subprocess.h"
#include "site/data/token_index.h"
#include "site/data/token_shard_writer.h"
#include "site/data/tokenizer.h"

namespace strait::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ShardsBenchOptions {
  std::string dir;
  int prepare_mib = 1024;
  double gib = 4.0;
  int steps = 5;
  int threads = 1;
  bool keep = false;
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

uint64_t XorShift(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Writes `bytes` of lines of pseudo-random words to `path`.
void WriteText(const std::string& path, int64_t bytes, uint64_t seed) {
  static const char* const kWords[] = {"the",   "and",   "of",     "to",   "in",         "that",
                                       "shall", "unto",  "lord",   "they", "earth",      "heaven",
                                       "light", "night", "waters", "day",  "caf\xc3\xa9"};
  std::ofstream out(path, std::ios::binary);
  std::string block;
  for (int64_t written = 0; written < bytes;) {
    block.clear();
    while (block.size() < (size_t{1} << 20)) {
      for (int w = 0; w < 12; ++w) {
        block += kWords[XorShift(seed) % (sizeof(kWords) / sizeof(kWords[0]))];
        block += w < 11 ? ' ' : '\n';
      }
    }
    const int64_t n = std::min<int64_t>(bytes - written, static_cast<int64_t>(block.size()));
    out.write(block.data(), n);
    written += n;
  }
}

absl::Status PrepareRate(const ShardsBenchOptions& o) {
  const fs::path dir = fs::path(o.dir) / "prepare";
  fs::create_directories(dir);
  site::TokenShardOptions options;
  const int64_t total = int64_t{o.prepare_mib} << 20;
  for (int d = 0; d < 8; ++d) {
    options.inputs.push_back((dir / absl::StrFormat("doc%d.txt", d)).string());
    WriteText(options.inputs.back(), total / 8, 0x9e3779b97f4a7c15ull + d);
  }
  options.out = (dir / "shards").string();
  const auto start = Clock::now();
  absl::StatusOr<site::TokenIndex> index =
      site::PrepareTokenShards(options, *site::MakeByteTokenizer(), nullptr);
  const double seconds = Seconds(start);
  if (!index.ok()) return index.status();
  std::printf(
      "prepare: %d MiB of text in 8 documents -> %lld byte tokens, %zu shards: %.2f s, "
      "%.1f MB/s (target 50)\n",
      o.prepare_mib, static_cast<long long>(index->tokens), index->shards.size(), seconds,
      static_cast<double>(total) / 1e6 / seconds);
  std::fflush(stdout);
  if (!o.keep) fs::remove_all(dir);
  return absl::OkStatus();
}

// A corpus of pseudo-random byte tokens stored as uint16, written as prepare would lay it out.
absl::StatusOr<site::TokenIndex> WriteTokenCorpus(const std::string& dir, int64_t tokens) {
  fs::create_directories(dir);
  site::TokenIndex index;
  index.vocab = 256;
  index.tokenizer = "bytes";
  index.tokens = tokens;
  const int64_t last = 64 << 10;  // The small last document: the held-out split.
  const int64_t big = (tokens - last) / 63;
  for (int d = 0; d < 64; ++d) {
    const int64_t offset = d * big;
    index.documents.push_back(
        {offset, d < 63 ? big : tokens - offset, d < 63 ? big : tokens - offset});
  }
  std::vector<uint16_t> block(size_t{1} << 24);
  uint64_t seed = 88172645463325252ull;
  for (int64_t done = 0; done < tokens;) {
    const int64_t n = std::min(tokens - done, site::kDefaultShardTokens);
    site::TokenShard shard{absl::StrFormat("shard-%05d.bin", index.shards.size()), n, 2 * n};
    std::ofstream out(fs::path(dir) / shard.file, std::ios::binary);
    for (int64_t written = 0; written < n;) {
      const int64_t m = std::min<int64_t>(n - written, static_cast<int64_t>(block.size()));
      for (int64_t i = 0; i < m; ++i) block[i] = static_cast<uint16_t>(XorShift(seed) & 0xff);
      out.write(reinterpret_cast<const char*>(block.data()), 2 * m);  // Little-endian host.
      written += m;
    }
    if (!out) return absl::InternalError(absl::StrCat(shard.file, ": write failed (disk full?)"));
    index.shards.push_back(shard);
    done += n;
  }
  std::ofstream(fs::path(dir) / site::kTokenIndexFile) << site::FormatTokenIndex(index);
  return index;
}

struct TrainFigures {
  int exit_code = -1;
  std::optional<double> first_step_seconds;
  double peak_rss_mib = 0;
  std::string log;
};

// Runs `argv`, its output read line by line: the time of the first "step" line, the peak RSS.
TrainFigures RunTimed(const std::vector<std::string>& argv) {
  TrainFigures f;
  int fds[2];
  if (::pipe(fds) != 0) return f;
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  FILE* in = ::fdopen(fds[0], "r");
  char* line = nullptr;
  size_t capacity = 0;
  while (::getline(&line, &capacity, in) > 0) {
    if (!f.first_step_seconds && std::string(line).rfind("step ", 0) == 0) {
      f.first_step_seconds = Seconds(start);
    }
    f.log += line;
  }
  std::free(line);
  std::fclose(in);
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  f.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux.
  return f;
}

absl::Status TrainOnCorpus(const ShardsBenchOptions& o) {
  const std::string corpus = (fs::path(o.dir) / "corpus").string();
  const auto start = Clock::now();
  const int64_t tokens = static_cast<int64_t>(o.gib * static_cast<double>(int64_t{1} << 30) / 2);
  STRAIT_ASSIGN_OR_RETURN(const site::TokenIndex index, WriteTokenCorpus(corpus, tokens));
  std::printf("corpus: %.2f GiB of uint16 tokens, %zu shards, %zu documents: written in %.1f s\n",
              static_cast<double>(2 * index.tokens) / (1 << 30), index.shards.size(),
              index.documents.size(), Seconds(start));
  std::fflush(stdout);
  const std::string job = (fs::path(o.dir) / "job.yaml").string();
  std::ofstream(job) << "name: shards-bench\n"
                        "model: {family: gpt, context: 128, dim: 64, depth: 2, heads: 4}\n"
                        "data: {format: tokens, path: corpus, validation: 0.001}\n"
                        "training: {steps: 100, global_batch: 32, microbatches: 1}\n"
                        "sites: [{id: a, layers: [0, 4]}]\n";
  const std::string strait = harness::FindStraitExecutable("strait");
  const TrainFigures f = RunTimed(
      {strait, "train", "--config", job, "--steps", std::to_string(o.steps), "--threads",
       std::to_string(o.threads), "--log-every", "1", "--out", (fs::path(o.dir) / "out").string()});
  if (f.exit_code != 0 || !f.first_step_seconds) {
    return absl::InternalError(
        absl::StrCat("strait train exited with ", f.exit_code, ":\n", f.log));
  }
  std::printf(
      "strait train (%d steps, context 128, batch 32): first step after %.2f s (target 5), "
      "peak RSS %.0f MiB (target 1024)\n",
      o.steps, *f.first_step_seconds, f.peak_rss_mib);
  if (!o.keep) fs::remove_all(corpus);
  return absl::OkStatus();
}

int RunShardsBench(const ShardsBenchOptions& o) {
  fs::create_directories(o.dir);
  struct statvfs disk {};
  const double need_gib = o.gib + 3.0 * o.prepare_mib / 1024.0 + 0.5;
  if (::statvfs(o.dir.c_str(), &disk) == 0 &&
      static_cast<double>(disk.f_bavail) * disk.f_frsize < need_gib * (1 << 30)) {
    std::fprintf(stderr, "strait bench shards: %s has less than the %.1f GiB this needs free\n",
                 o.dir.c_str(), need_gib);
    return 2;
  }
  absl::Status s = o.prepare_mib > 0 ? PrepareRate(o) : absl::OkStatus();
  if (s.ok() && o.gib > 0) s = TrainOnCorpus(o);
  if (!o.keep) fs::remove_all(o.dir);
  if (!s.ok()) {
    std::fprintf(stderr, "strait bench shards: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void AddBenchShardsCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<ShardsBenchOptions>();
  o->dir = (fs::temp_directory_path() / "strait-shards-bench").string();
  CLI::App* cmd = bench.add_subcommand(
      "shards",
      "Token shards: `strait data prepare`'s MB/s on a generated text, then a large corpus of "
      "uint16 tokens and `strait train` on it: seconds to the first step and peak RSS. Needs "
      "--gib + 3 x --prepare-mib/1024 GiB of free disk under --dir; removes what it wrote.");
  cmd->add_option("--dir", o->dir, "Work directory (removed at the end)")->capture_default_str();
  cmd->add_option("--prepare-mib", o->prepare_mib, "MiB of text to prepare (0: skip)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--gib", o->gib, "GiB of tokens to train on (0: skip)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Training steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads of `strait train`")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--keep", o->keep, "Keep the corpora and the run's output");
  cmd->callback([=] { *exit_code = RunShardsBench(*o); });
}

}  // namespace strait::bench
