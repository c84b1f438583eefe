// `strait bench codecs [--json] [--mib N] [--width W] [--klt-device cpu|cuda]`: for each tensor
// kind (normal floats, ReLU activations, gradients) and codec chain: compression ratio against
// fp32, encode and decode MB/s of fp32 input, max and RMS error, and each speed as a fraction of
// memcpy measured on the same buffer in the same run. zstd:1 is also compared with the zstd command
// line's own benchmark on the same bytes. Single-threaded (klt's transforms on the GPU with
// --klt-device cuda). MB = 10^6 bytes, as zstd -b prints.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "compression/codec_chain.h"
#include "site/backend/backend_factory.h"

namespace strait::bench {
namespace {

using compression::CodecChain;
using compression::DecodedTensor;
using compression::ResidualStore;
using compression::TensorDecoder;
using Clock = std::chrono::steady_clock;

const char* const kChains[] = {"none",         "fp16",      "bf16",           "bf16+shuffle+zstd",
                               "int8",         "int8+zstd", "int8:256:sr",    "int4",
                               "int4+zstd",    "topk:0.01", "topk:0.01+zstd", "topk:0.01:ef+zstd",
                               "shuffle+zstd", "zstd:1"};

struct Tensor {
  std::string name;
  std::vector<float> values;
};

// Normal floats; ReLU activations (half zeros); gradients: normal with a heavy-tailed per-row scale
// (rows of 1024), as layers and channels differ in magnitude.
std::vector<Tensor> MakeTensors(size_t n) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Tensor> tensors = {{"normal", std::vector<float>(n)},
                                 {"relu", std::vector<float>(n)},
                                 {"gradient", std::vector<float>(n)}};
  float row_scale = 1;
  for (size_t i = 0; i < n; ++i) {
    if (i % 1024 == 0) row_scale = 1e-3f * std::exp(normal(rng));
    tensors[0].values[i] = normal(rng);
    tensors[1].values[i] = std::max(0.0f, normal(rng));
    tensors[2].values[i] = row_scale * normal(rng);
  }
  return tensors;
}

// Best of `repeats` runs of `fn`, in seconds (the least disturbed by the other users of the cores).
template <typename Fn>
double BestSeconds(int repeats, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

struct Row {
  std::string tensor, chain;
  double ratio = 0, encode_mbs = 0, decode_mbs = 0, max_error = 0, rms_error = 0;
  double memcpy_mbs = 0;  // measured just before this row, on the same input buffer
};

// Runs `zstd -b1` on the bytes and returns its compression and decompression MB/s (0 on failure).
std::pair<double, double> ZstdCliBench(const std::vector<float>& values) {
  char path[] = "/tmp/strait-codec-bench-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return {0, 0};
  FILE* file = fdopen(fd, "wb");
  fwrite(values.data(), 4, values.size(), file);
  fclose(file);
  std::string command = absl::StrFormat("zstd -b1 -e1 -i3 --single-thread %s 2>&1", path);
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  size_t got;
  while (pipe && (got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  if (pipe) pclose(pipe);
  std::remove(path);
  // The last report: "... (x1.670),  512.3 MB/s, 1500.2 MB/s"
  size_t last = output.rfind("MB/s");
  size_t first = last == std::string::npos ? last : output.rfind("MB/s", last - 1);
  if (first == std::string::npos) return {0, 0};
  size_t c = output.rfind(',', first), d = output.rfind(',', last);
  return {std::atof(output.c_str() + c + 1), std::atof(output.c_str() + d + 1)};
}

struct Options {
  bool json = false;
  int mib = 32, repeats = 5;
  uint64_t width = 0;  // Rows of this many values (proj and klt code rows); 0: one row.
  std::string klt_device = "cpu";
  std::vector<std::string> chains{std::begin(kChains), std::end(kChains)};
};

int Run(const Options& o) {
  const bool json = o.json;
  const int mib = o.mib, repeats = o.repeats;
  const size_t n = static_cast<size_t>(mib) * (1 << 20) / 4;
  if (o.width > 0 && n % o.width != 0) {
    std::cerr << "strait bench codecs: --width " << o.width << " does not divide the " << n
              << " values of --mib " << mib << "\n";
    return 2;
  }
  const std::vector<uint64_t> shape =
      o.width > 0 ? std::vector<uint64_t>{n / o.width, o.width} : std::vector<uint64_t>{n};
  if (o.klt_device == "cuda" && !site::BuiltWithCuda()) {
    std::cerr << "strait bench codecs: --klt-device cuda, but this build has no CUDA support\n";
    return 2;
  }
  const compression::CodecOptions options{
      .klt_math = site::KltMathFor(o.klt_device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu)};
  const double mb = 4.0 * n / 1e6;
  std::vector<Tensor> tensors = MakeTensors(n);
  std::vector<float> copy(n);
  nlohmann::json out = {{"mib", mib}, {"repeats", repeats}, {"rows", nlohmann::json::array()}};
  std::vector<Row> rows;
  // zstd's own benchmark on the bytes a zstd:1 row just compressed (normal and ReLU tensors).
  struct CliRow {
    std::string tensor;
    double cli_c, cli_d, ours_c, ours_d;
  };
  std::vector<CliRow> cli;
  for (const Tensor& t : tensors) {
    for (const std::string& spec : o.chains) {
      auto chain = CodecChain::Create(spec, options);
      if (!chain.ok()) {
        std::cerr << chain.status() << "\n";
        return 2;
      }
      ResidualStore residuals;
      TensorDecoder decoder(options);
      DecodedTensor decoded;
      absl::Span<const uint8_t> frame;  // the last Encode's, valid until the chain's next Encode
      Row row{t.name, spec};
      // memcpy right before the chain, so that both see the same load on the shared cores.
      row.memcpy_mbs =
          mb / BestSeconds(repeats, [&] { std::memcpy(copy.data(), t.values.data(), 4 * n); });
      // Each frame decoded right after it is encoded: klt's receiver follows its sender frame by
      // frame.
      absl::Status status;
      double encode_s = 1e30, decode_s = 1e30;
      for (int r = 0; r < repeats && status.ok(); ++r) {
        encode_s = std::min(encode_s, BestSeconds(1, [&] {
                              auto encoded = (*chain)->Encode(t.values, shape, &residuals, "bench");
                              if (encoded.ok()) frame = *encoded;
                              status.Update(encoded.status());
                            }));
        if (!status.ok()) break;
        decode_s = std::min(
            decode_s, BestSeconds(1, [&] { status.Update(decoder.Decode(frame, &decoded)); }));
      }
      if (!status.ok()) {
        std::cerr << "strait bench codecs: " << spec << " on " << t.name << ": " << status << "\n";
        return 1;
      }
      row.encode_mbs = mb / encode_s;
      row.decode_mbs = mb / decode_s;
      row.ratio = 4.0 * n / frame.size();
      double sum_sq = 0;
      for (size_t i = 0; i < n; ++i) {
        double e = std::fabs(static_cast<double>(decoded.values[i]) - t.values[i]);
        row.max_error = std::max(row.max_error, e);
        sum_sq += e * e;
      }
      row.rms_error = std::sqrt(sum_sq / n);
      rows.push_back(row);
      if (spec == "zstd:1" && t.name != "gradient") {
        auto [c, d] = ZstdCliBench(t.values);
        cli.push_back({t.name, c, d, row.encode_mbs, row.decode_mbs});
      }
    }
  }
  if (json) {
    for (const Row& r : rows) {
      out["rows"].push_back({{"tensor", r.tensor},
                             {"chain", r.chain},
                             {"ratio", r.ratio},
                             {"encode_mbs", r.encode_mbs},
                             {"decode_mbs", r.decode_mbs},
                             {"memcpy_mbs", r.memcpy_mbs},
                             {"encode_vs_memcpy", r.encode_mbs / r.memcpy_mbs},
                             {"decode_vs_memcpy", r.decode_mbs / r.memcpy_mbs},
                             {"max_error", r.max_error},
                             {"rms_error", r.rms_error}});
    }
    out["zstd_cli"] = nlohmann::json::array();
    for (const CliRow& c : cli) {
      out["zstd_cli"].push_back({{"tensor", c.tensor},
                                 {"cli_compress_mbs", c.cli_c},
                                 {"cli_decompress_mbs", c.cli_d},
                                 {"zstd1_encode_mbs", c.ours_c},
                                 {"zstd1_decode_mbs", c.ours_d}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "%d MiB of fp32 per tensor (rows of %d), one thread, klt on the %s, best of %d runs; MB = "
      "10^6 bytes of fp32 input; memcpy measured on the same buffer just before each row\n\n",
      mib, shape.back(), o.klt_device, repeats);
  std::cout << "| tensor | chain | ratio | encode MB/s | x memcpy | decode MB/s | x memcpy | "
               "memcpy MB/s | max error | RMS error |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    std::cout << absl::StrFormat(
        "| %s | %s | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f | %.3g | %.3g |\n", r.tensor, r.chain,
        r.ratio, r.encode_mbs, r.encode_mbs / r.memcpy_mbs, r.decode_mbs,
        r.decode_mbs / r.memcpy_mbs, r.memcpy_mbs, r.max_error, r.rms_error);
  }
  std::cout << "\n| tensor | zstd -b1 CLI compress MB/s | chain zstd:1 encode MB/s | ratio | "
               "CLI decompress MB/s | chain zstd:1 decode MB/s | ratio |\n"
               "|---|---:|---:|---:|---:|---:|---:|\n";
  for (const CliRow& c : cli) {
    std::cout << absl::StrFormat("| %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", c.tensor,
                                 c.cli_c, c.ours_c, c.cli_c > 0 ? c.ours_c / c.cli_c : 0, c.cli_d,
                                 c.ours_d, c.cli_d > 0 ? c.ours_d / c.cli_d : 0);
  }
  return 0;
}

}  // namespace

void AddBenchCodecsCommand(CLI::App& bench, int* exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "codecs", "Codec chains on normal, ReLU and gradient tensors: ratio, MB/s, error, vs memcpy");
  auto o = std::make_shared<Options>();
  cmd->add_flag("--json", o->json, "Print JSON instead of a Markdown table");
  cmd->add_option("--mib", o->mib, "MiB of fp32 per tensor")->check(CLI::Range(1, 4096));
  cmd->add_option("--repeats", o->repeats, "Timed runs per figure (the best counts)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--chains", o->chains, "Codec chains to measure (default: a representative set)")
      ->delimiter(',');
  cmd->add_option("--width", o->width,
                  "Rows of this many values, as a layer's activations (proj and klt code rows; "
                  "default: one row)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--klt-device", o->klt_device, "Where klt transforms: cpu or cuda (device 0)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->callback([=] { *exit_code = Run(*o); });
}

}  // namespace strait::bench
