// `strait data prepare`: UTF-8 documents to token shards for `data: {format: tokens, path: DIR}`
// (site/data/token_shard_writer.h says how they are written).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "site/data/token_shard_writer.h"
#include "site/data/tokenizer.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string tokenizer;
  std::string out;
  int64_t shard_tokens = site::kDefaultShardTokens;
  std::string dtype = "auto";
};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Progress on stderr: a bar redrawn in place on a terminal, else a plain line every 10 s.
class ProgressMeter {
 public:
  ProgressMeter() : tty_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

  void Update(const site::TokenShardProgress& p, bool force = false) {
    const auto now = Clock::now();
    last_progress_ = p;
    const auto every = tty_ ? std::chrono::milliseconds(100) : std::chrono::seconds(10);
    if (!force && now - last_ < every) return;
    last_ = now;
    const double mb = static_cast<double>(p.bytes_read) / 1e6;
    const double total = static_cast<double>(p.bytes_total) / 1e6;
    const double share = total > 0 ? mb / total : 1.0;
    const double rate = mb / std::max(Seconds(start_), 1e-9);
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(share * kWidth);
      std::fprintf(stderr, "\r[%s%s] %.1f / %.1f MB %3d%% %.1f MB/s, %lld tokens ",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), mb,
                   total, static_cast<int>(share * 100), rate, static_cast<long long>(p.tokens));
      drawn_ = true;
    } else {
      std::fprintf(stderr, "prepare: %.1f of %.1f MB read (%d%%), %.1f MB/s, %lld tokens\n", mb,
                   total, static_cast<int>(share * 100), rate, static_cast<long long>(p.tokens));
    }
    std::fflush(stderr);
  }
  // Ends the bar at the last figures.
  void Done() {
    if (!drawn_) return;
    Update(last_progress_, /*force=*/true);
    std::fprintf(stderr, "\n");
  }

 private:
  const bool tty_;
  const Clock::time_point start_;
  Clock::time_point last_;
  site::TokenShardProgress last_progress_;
  bool drawn_ = false;
};

int ExitCode(const absl::Status& s) {
  const absl::StatusCode code = s.code();
  return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ? 2 : 1;
}

int RunPrepare(const PrepareOptions& o) {
  absl::StatusOr<std::unique_ptr<site::Tokenizer>> tokenizer =
      o.tokenizer == "bytes" ? site::MakeByteTokenizer()
                             : site::LoadSentencePieceTokenizer(o.tokenizer);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "strait data prepare: %s\n",
                 std::string(tokenizer.status().message()).c_str());
    return ExitCode(tokenizer.status());
  }
  site::TokenShardOptions options;
  options.inputs = o.inputs;
  options.out = o.out;
  options.shard_tokens = o.shard_tokens;
  if (o.dtype != "auto") {
    options.dtype = o.dtype == "uint16" ? site::TokenDtype::kUint16 : site::TokenDtype::kUint32;
  }
  ProgressMeter meter;
  const auto start = Clock::now();
  absl::StatusOr<site::TokenIndex> index = site::PrepareTokenShards(
      options, **tokenizer, [&meter](const site::TokenShardProgress& p) { meter.Update(p); });
  meter.Done();
  if (!index.ok()) {
    std::fprintf(stderr, "strait data prepare: %s\n",
                 std::string(index.status().message()).c_str());
    return ExitCode(index.status());
  }
  const double seconds = Seconds(start);
  int64_t bytes = 0;
  for (const site::TokenDocument& d : index->documents) bytes += d.bytes;
  std::printf("wrote %s: %zu documents, %lld tokens (%s) in %zu shards, and index.json\n",
              o.out.c_str(), index->documents.size(), static_cast<long long>(index->tokens),
              site::ToString(index->dtype), index->shards.size());
  std::printf("read %.1f MB in %.2f s (%.1f MB/s), %.3f bytes/token\n",
              static_cast<double>(bytes) / 1e6, seconds,
              static_cast<double>(bytes) / 1e6 / std::max(seconds, 1e-9),
              static_cast<double>(bytes) / static_cast<double>(index->tokens));
  // Absolute: a job spec resolves a relative path against its own folder, not this one.
  const auto absolute = [](const std::string& p) {
    return std::filesystem::absolute(p).lexically_normal().string();
  };
  std::printf("use it: data: {format: tokens, path: %s, tokenizer: %s}, model: {vocab: %d}\n",
              absolute(o.out).c_str(),
              o.tokenizer == "bytes" ? "bytes" : absolute(o.tokenizer).c_str(), index->vocab);
  return 0;
}

}  // namespace

void AddDataCommand(CLI::App& app, int* exit_code) {
  CLI::App* data =
      app.add_subcommand("data", "Data sets of language models (data: format: tokens)");
  data->require_subcommand(1);
  auto o = std::make_shared<PrepareOptions>();
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize UTF-8 documents into token shards for `data: {format: tokens, path: DIR}`: "
      "DIR/shard-00000.bin, ... (raw little-endian uint16 tokens, or uint32 for a vocabulary "
      "over 65536) and DIR/index.json (the tokenizer's fingerprint, the shards, and where each "
      "document starts). Each --input file is one document; the held-out split (data.validation) "
      "is whole documents at the end, so give several. Files are read in 16 MiB chunks, never "
      "whole; a document may span shards. The index is written last, so an interrupted run leaves "
      "no index. Progress goes to stderr. Exit code 2 for bad input.");
  prepare->add_option("--input", o->inputs, "UTF-8 documents, in order (one or more files)")
      ->required()
      ->expected(1, -1)
      ->type_name("FILE...");
  prepare
      ->add_option("--tokenizer", o->tokenizer,
                   "bytes, or a SentencePiece model (the job's data.tokenizer)")
      ->required()
      ->type_name("MODEL|bytes");
  prepare->add_option("--out", o->out, "Directory to write (made if missing)")
      ->required()
      ->type_name("DIR");
  prepare->add_option("--shard-tokens", o->shard_tokens, "Tokens per shard (the last holds fewer)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  prepare->add_option("--dtype", o->dtype, "auto (uint16 when the vocabulary fits), uint16, uint32")
      ->check(CLI::IsMember({"auto", "uint16", "uint32"}))
      ->capture_default_str();
  prepare->callback([=] { *exit_code = RunPrepare(*o); });
}

}  // namespace strait::tools
