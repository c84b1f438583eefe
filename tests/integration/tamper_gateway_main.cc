// strait-tamper-gateway: strait-gateway with a fault injected, for the end-to-end security test
// (site_federation_test, SecurityTest): the same daemon and flags (RunGateway) plus --tamper-frame
// N, which flips one byte in the first chunk of the N-th frame pushed, as a compromised gateway or
// a corrupting path might. Test code only (DESIGN.md §9): built under tests/, never installed; the
// production gateway has no such flag.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/command_line.h"
#include "core/tensor_key.h"
#include "gateway/daemon/run_gateway.h"
#include "gateway/exchange/push_interceptor.h"

namespace {

// Flips the middle byte of the first chunk of the `n`-th frame pushed (1-based), once.
class TamperNthFrame : public strait::gateway::PushInterceptor {
 public:
  explicit TamperNthFrame(uint64_t n) : n_(n) {}

  void OnFirstChunk(strait::v1::PushChunk& chunk) override {
    if (seen_.fetch_add(1) + 1 != n_) return;
    std::string& data = *chunk.mutable_chunk()->mutable_data();
    if (data.empty()) return;
    data[data.size() / 2] ^= 0x01;
    spdlog::warn("test fault injection: flipped a byte of {}",
                 strait::TensorKeyToString(chunk.header().key()));
  }

 private:
  const uint64_t n_;
  std::atomic<uint64_t> seen_{0};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strait-tamper-gateway: strait-gateway that alters one pushed frame. Tests only."};
  strait::gateway::GatewayDaemonOptions options;
  strait::gateway::AddGatewayFlags(app, options);
  uint64_t tamper_frame = 0;
  app.add_option("--tamper-frame", tamper_frame,
                 "Flip a byte in the first chunk of the N-th frame pushed (1-based)")
      ->required();
  if (std::optional<int> code = strait::ParseCommandLine(app, argc, argv)) return *code;
  options.push_interceptor = std::make_shared<TamperNthFrame>(tamper_frame);
  return strait::gateway::RunGateway(options);
}
