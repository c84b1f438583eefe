// strait-tamper-gateway: strait-gateway with a fault injected, for the end-to-end security test
// (site_federation_test, SecurityTest): the same daemon and flags (RunGateway) plus --tamper-frame
// N, which flips one byte in the first chunk of the N-th frame pushed, as a compromised gateway or
// a corrupting path might. Test code only (DESIGN.md §9): built under tests/, never installed; the
// production gateway has no such flag, and its code checks nothing per call for it. The fault is a
// gRPC server interceptor on the Exchange method, added through the daemon's ServerHook: it alters
// the SiteMessage after gRPC has read it and before the gateway's handler sees it.
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/tensor_key.h"
#include "gateway/daemon/run_gateway.h"
#include "gateway/rpc/server_hook.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace {

namespace experimental = grpc::experimental;

constexpr char kExchangeMethod[] = "/strait.v1.Gateway/Exchange";

// Counts the frames pushed on every Exchange stream (chunk 0 of a transfer starts one) and flips
// the middle byte of the first chunk of the `n`-th (1-based), once.
class TamperNthFrame : public experimental::Interceptor {
 public:
  TamperNthFrame(uint64_t n, std::atomic<uint64_t>& seen) : n_(n), seen_(seen) {}

  void Intercept(experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            experimental::InterceptionHookPoints::POST_RECV_MESSAGE)) {
      auto* message = static_cast<strait::v1::SiteMessage*>(methods->GetRecvMessage());
      if (message != nullptr && message->has_push() && message->push().chunk().index() == 0 &&
          seen_.fetch_add(1) + 1 == n_) {
        Tamper(*message->mutable_push());
      }
    }
    methods->Proceed();
  }

 private:
  static void Tamper(strait::v1::PushChunk& push) {
    std::string& data = *push.mutable_chunk()->mutable_data();
    if (data.empty()) return;
    data[data.size() / 2] ^= 0x01;
    spdlog::warn("test fault injection: flipped a byte of {}",
                 strait::TensorKeyToString(push.header().key()));
  }

  const uint64_t n_;
  std::atomic<uint64_t>& seen_;
};

class TamperFactory : public experimental::ServerInterceptorFactoryInterface {
 public:
  explicit TamperFactory(uint64_t n) : n_(n) {}

  experimental::Interceptor* CreateServerInterceptor(experimental::ServerRpcInfo* info) override {
    if (std::strcmp(info->method(), kExchangeMethod) != 0) return nullptr;  // Not intercepted.
    return new TamperNthFrame(n_, seen_);
  }

 private:
  const uint64_t n_;
  std::atomic<uint64_t> seen_{0};  // Frames pushed so far, over all streams.
};

// Adds the interceptor to the gateway's gRPC server as it is built.
class TamperHook : public strait::gateway::ServerHook {
 public:
  explicit TamperHook(uint64_t n) : n_(n) {}

  void AddTo(grpc::ServerBuilder& builder) override {
    std::vector<std::unique_ptr<experimental::ServerInterceptorFactoryInterface>> factories;
    factories.push_back(std::make_unique<TamperFactory>(n_));
    builder.experimental().SetInterceptorCreators(std::move(factories));
  }

 private:
  const uint64_t n_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"strait-tamper-gateway: strait-gateway that alters one pushed frame. Tests only."};
  strait::gateway::GatewayDaemonOptions options;
  strait::gateway::AddGatewayFlags(app, options);
  uint64_t tamper_frame = 0;
  app.add_option("--tamper-frame", tamper_frame,
                 "Flip a byte in the first chunk of the N-th frame pushed (1-based)")
      ->required()
      ->check(CLI::PositiveNumber);
  if (std::optional<int> code = strait::ParseCommandLine(app, argc, argv)) return *code;
  options.server_hook = std::make_shared<TamperHook>(tamper_frame);
  return strait::gateway::RunGateway(options);
}
