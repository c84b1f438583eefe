// Smoke test of strait::site::CudnnAttention (site/backend/cuda/cudnn_attention.{h,cc}) against a
// naive CPU reference in double precision. Not part of the repository.
//
// Build (from /work/typed), one line:
//   g++ -std=c++20 -O2 -Wall -Wextra -I/work/typed -I/usr/local/cuda/include
//     /tmp/cudnn_attention_smoke.cc site/backend/cuda/cudnn_attention.cc
//     site/backend/cuda/cudnn_attention_graphs.cc site/backend/cuda/cudnn_graph.cc
//     -L/usr/local/cuda/lib64 -lcudnn -lcudart -labsl_status -labsl_statusor -labsl_strings
//     -Wl,-rpath,/usr/local/cuda/lib64 -o /tmp/cudnn_attention_smoke
// Run: /tmp/cudnn_attention_smoke [--no-timing]
//   STRAIT_CUDNN_ATTENTION_VERBOSE=1 prints the engine of each plan.
// Each shape is checked twice: with the deterministic backward graph preferred (the default) and
// with STRAIT_CUDNN_ATTENTION_DETERMINISTIC=0 (fp32 dQ accumulator graph).
// Exit status: 0 all checks pass, 1 a check failed, 2 no GPU / setup failure.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "site/backend/cuda/cudnn_attention.h"

using strait::site::CudnnAttention;
using strait::site::CudnnAttentionShape;

namespace {

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "CUDA error in %s: %s: %s\n", what, cudaGetErrorName(e),
               cudaGetErrorString(e));
  return false;
}

// A device buffer freed on scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (!CudaOk(cudaMalloc(&p, n), "cudaMalloc")) p = nullptr;
  }
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Reference {
  std::vector<double> out, lse, dqkv;
};

// The naive attention on the bf16-rounded inputs, in double.
Reference ComputeReference(const CudnnAttentionShape& s, const std::vector<uint16_t>& qkv,
                           const std::vector<uint16_t>& dout) {
  const int n = s.n, T = s.tokens, H = s.heads, D = s.dh;
  const size_t row = 3ull * H * D;
  Reference r;
  r.out.assign(static_cast<size_t>(n) * T * H * D, 0.0);
  r.lse.assign(static_cast<size_t>(n) * H * T, 0.0);
  r.dqkv.assign(static_cast<size_t>(n) * T * row, 0.0);
  auto at = [&](int b, int t, int which, int h, int c) {
    return Bf16ToFloat(qkv[(static_cast<size_t>(b) * T + t) * row + which * H * D + h * D + c]);
  };
  std::vector<double> p(static_cast<size_t>(T) * T), ds(static_cast<size_t>(T) * T);
  for (int b = 0; b < n; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < T; ++j) {
          double dot = 0;
          for (int c = 0; c < D; ++c)
            dot += static_cast<double>(at(b, i, 0, h, c)) * at(b, j, 1, h, c);
          const double sc =
              (s.causal && j > i) ? -std::numeric_limits<double>::infinity() : dot * s.scale;
          p[static_cast<size_t>(i) * T + j] = sc;
          m = std::max(m, sc);
        }
        double sum = 0;
        for (int j = 0; j < T; ++j) sum += std::exp(p[static_cast<size_t>(i) * T + j] - m);
        const double lse = m + std::log(sum);
        r.lse[(static_cast<size_t>(b) * H + h) * T + i] = lse;
        for (int j = 0; j < T; ++j) {
          p[static_cast<size_t>(i) * T + j] = std::exp(p[static_cast<size_t>(i) * T + j] - lse);
        }
        for (int c = 0; c < D; ++c) {
          double o = 0;
          for (int j = 0; j < T; ++j) o += p[static_cast<size_t>(i) * T + j] * at(b, j, 2, h, c);
          r.out[((static_cast<size_t>(b) * T + i) * H + h) * D + c] = o;
        }
      }
      auto d_o = [&](int t, int c) {
        return static_cast<double>(
            Bf16ToFloat(dout[((static_cast<size_t>(b) * T + t) * H + h) * D + c]));
      };
      for (int i = 0; i < T; ++i) {
        double delta = 0;
        for (int c = 0; c < D; ++c)
          delta += d_o(i, c) * r.out[((static_cast<size_t>(b) * T + i) * H + h) * D + c];
        for (int j = 0; j < T; ++j) {
          double dp = 0;
          for (int c = 0; c < D; ++c) dp += d_o(i, c) * at(b, j, 2, h, c);
          ds[static_cast<size_t>(i) * T + j] = p[static_cast<size_t>(i) * T + j] * (dp - delta);
        }
      }
      auto grad = [&](int t, int which, int c) -> double& {
        return r.dqkv[(static_cast<size_t>(b) * T + t) * row + which * H * D + h * D + c];
      };
      for (int i = 0; i < T; ++i) {
        for (int c = 0; c < D; ++c) {
          double dq = 0;
          for (int j = 0; j < T; ++j) dq += ds[static_cast<size_t>(i) * T + j] * at(b, j, 1, h, c);
          grad(i, 0, c) = dq * s.scale;
        }
      }
      for (int j = 0; j < T; ++j) {
        for (int c = 0; c < D; ++c) {
          double dk = 0, dv = 0;
          for (int i = 0; i < T; ++i) {
            dk += ds[static_cast<size_t>(i) * T + j] * at(b, i, 0, h, c);
            dv += p[static_cast<size_t>(i) * T + j] * d_o(i, c);
          }
          grad(j, 1, c) = dk * s.scale;
          grad(j, 2, c) = dv;
        }
      }
    }
  }
  return r;
}

// Max |got - want| over max |want|, and the RMS error over the RMS of want; NaNs fail.
bool Compare(const char* name, const std::vector<double>& want, const std::vector<double>& got,
             double max_tol, double rms_tol) {
  double max_err = 0, max_ref = 0, err2 = 0, ref2 = 0;
  size_t nans = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++nans;
      continue;
    }
    const double e = std::fabs(got[i] - want[i]);
    max_err = std::max(max_err, e);
    max_ref = std::max(max_ref, std::fabs(want[i]));
    err2 += e * e;
    ref2 += want[i] * want[i];
  }
  const double rel_max = max_err / std::max(max_ref, 1e-12);
  const double rel_rms = std::sqrt(err2 / std::max(ref2, 1e-24));
  const bool ok = nans == 0 && rel_max <= max_tol && rel_rms <= rms_tol;
  std::printf(
      "    %-4s max|err|/max|ref| = %.3e (tol %.0e), rms rel = %.3e (tol %.0e), non-finite %zu"
      " -> %s\n",
      name, rel_max, max_tol, rel_rms, rms_tol, nans, ok ? "ok" : "FAIL");
  return ok;
}

// Runs forward + backward of one shape and checks them; false on any failure.
bool CheckShape(CudnnAttention& attn, cudaStream_t stream, const CudnnAttentionShape& s,
                uint32_t seed) {
  std::printf("  shape n=%d tokens=%d heads=%d dh=%d scale=%.4f %s\n", s.n, s.tokens, s.heads, s.dh,
              s.scale, s.causal ? "causal" : "non-causal");
  const bool supported = attn.Supports(s);
  std::printf("    Supports: %s\n", supported ? "yes" : "no");
  const size_t rows = static_cast<size_t>(s.n) * s.tokens;
  const size_t hd = static_cast<size_t>(s.heads) * s.dh;
  std::vector<uint16_t> qkv(rows * 3 * hd), dout(rows * hd);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto& x : qkv) x = FloatToBf16(normal(rng));
  for (auto& x : dout) x = FloatToBf16(normal(rng));

  DeviceBuffer d_qkv(qkv.size() * 2), d_out(rows * hd * 2), d_lse(rows * s.heads * 4),
      d_dout(dout.size() * 2), d_dqkv(qkv.size() * 2);
  if (!d_qkv.p || !d_out.p || !d_lse.p || !d_dout.p || !d_dqkv.p) return false;
  if (!CudaOk(cudaMemcpy(d_qkv.p, qkv.data(), d_qkv.bytes, cudaMemcpyHostToDevice), "copy qkv") ||
      !CudaOk(cudaMemcpy(d_dout.p, dout.data(), d_dout.bytes, cudaMemcpyHostToDevice),
              "copy dout") ||
      // NaN sentinels: every output element must be written.
      !CudaOk(cudaMemset(d_out.p, 0xff, d_out.bytes), "memset out") ||
      !CudaOk(cudaMemset(d_lse.p, 0xff, d_lse.bytes), "memset lse") ||
      !CudaOk(cudaMemset(d_dqkv.p, 0xff, d_dqkv.bytes), "memset dqkv")) {
    return false;
  }

  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = attn.Forward(s, d_qkv.p, d_out.p, static_cast<float*>(d_lse.p));
  if (!st.ok()) {
    std::printf("    Forward failed: %s\n", std::string(st.message()).c_str());
    return false;
  }
  st = attn.Backward(s, d_qkv.p, d_out.p, static_cast<const float*>(d_lse.p), d_dout.p, d_dqkv.p);
  if (!st.ok()) {
    std::printf("    Backward failed: %s\n", std::string(st.message()).c_str());
    return false;
  }
  if (!CudaOk(cudaStreamSynchronize(stream), "sync after forward/backward")) return false;
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("    first forward+backward (plan builds included): %.1f ms\n", first_ms);

  std::vector<uint16_t> out(rows * hd), dqkv(qkv.size()), dqkv2(qkv.size());
  std::vector<float> lse(rows * s.heads);
  if (!CudaOk(cudaMemcpy(out.data(), d_out.p, d_out.bytes, cudaMemcpyDeviceToHost), "copy out") ||
      !CudaOk(cudaMemcpy(lse.data(), d_lse.p, d_lse.bytes, cudaMemcpyDeviceToHost), "copy lse") ||
      !CudaOk(cudaMemcpy(dqkv.data(), d_dqkv.p, d_dqkv.bytes, cudaMemcpyDeviceToHost),
              "copy dqkv")) {
    return false;
  }
  // Determinism: the backward again, bit for bit.
  st = attn.Backward(s, d_qkv.p, d_out.p, static_cast<const float*>(d_lse.p), d_dout.p, d_dqkv.p);
  if (!st.ok() || !CudaOk(cudaMemcpy(dqkv2.data(), d_dqkv.p, d_dqkv.bytes, cudaMemcpyDeviceToHost),
                          "copy dqkv again")) {
    std::printf("    second Backward failed: %s\n", std::string(st.message()).c_str());
    return false;
  }
  const bool bitwise_same = std::memcmp(dqkv.data(), dqkv2.data(), dqkv.size() * 2) == 0;
  std::printf("    backward repeated bit for bit: %s\n", bitwise_same ? "yes" : "no");

  const Reference ref = ComputeReference(s, qkv, dout);
  auto widen = [](const std::vector<uint16_t>& v) {
    std::vector<double> w(v.size());
    for (size_t i = 0; i < v.size(); ++i) w[i] = Bf16ToFloat(v[i]);
    return w;
  };
  std::vector<double> lse_d(lse.begin(), lse.end());
  const std::vector<double> got = widen(dqkv);
  // Split dqkv into its thirds for separate reports.
  const size_t row = 3 * hd;
  std::vector<double> want_q, want_k, want_v, got_q, got_k, got_v;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < hd; ++c) {
      want_q.push_back(ref.dqkv[r * row + c]);
      want_k.push_back(ref.dqkv[r * row + hd + c]);
      want_v.push_back(ref.dqkv[r * row + 2 * hd + c]);
      got_q.push_back(got[r * row + c]);
      got_k.push_back(got[r * row + hd + c]);
      got_v.push_back(got[r * row + 2 * hd + c]);
    }
  }
  bool ok = supported;
  ok &= Compare("out", ref.out, widen(out), 2e-2, 1e-2);
  ok &= Compare("lse", ref.lse, lse_d, 1e-3, 1e-3);
  ok &= Compare("dq", want_q, got_q, 3e-2, 2e-2);
  ok &= Compare("dk", want_k, got_k, 3e-2, 2e-2);
  ok &= Compare("dv", want_v, got_v, 3e-2, 2e-2);
  return ok;
}

// Error paths: they must come back as statuses, not crashes.
bool CheckErrors(CudnnAttention& attn) {
  bool ok = true;
  CudnnAttentionShape bad{1, 16, 1, 12, 0.3f, false};  // dh not a multiple of 8
  if (attn.Supports(bad)) {
    std::printf("  Supports(dh=12) said yes: FAIL\n");
    ok = false;
  }
  absl::Status st = attn.Forward(bad, nullptr, nullptr, nullptr);
  std::printf("  Forward(dh=12, null pointers): %s\n", st.ToString().c_str());
  ok &= !st.ok();
  CudnnAttentionShape good{1, 16, 1, 64, 0.125f, true};
  DeviceBuffer buf(1 << 20);
  if (buf.p == nullptr) return false;
  st = attn.Forward(good, static_cast<char*>(buf.p) + 2, static_cast<char*>(buf.p) + 65536,
                    reinterpret_cast<float*>(static_cast<char*>(buf.p) + 131072));
  std::printf("  Forward(misaligned qkv): %s\n", st.ToString().c_str());
  ok &= !st.ok();
  st = attn.Backward(good, buf.p, static_cast<char*>(buf.p) + 65536,
                     reinterpret_cast<const float*>(static_cast<char*>(buf.p) + 131072),
                     static_cast<char*>(buf.p) + 196608, buf.p);
  std::printf("  Backward(dqkv aliasing qkv): %s\n", st.ToString().c_str());
  ok &= !st.ok();
  return ok;
}

void Time(CudnnAttention& attn, cudaStream_t stream, const CudnnAttentionShape& s) {
  std::printf("  timing n=%d tokens=%d heads=%d dh=%d %s\n", s.n, s.tokens, s.heads, s.dh,
              s.causal ? "causal" : "non-causal");
  if (!attn.Supports(s)) {
    std::printf("    not supported\n");
    return;
  }
  const size_t rows = static_cast<size_t>(s.n) * s.tokens;
  const size_t hd = static_cast<size_t>(s.heads) * s.dh;
  DeviceBuffer qkv(rows * 3 * hd * 2), out(rows * hd * 2), lse(rows * s.heads * 4),
      dout(rows * hd * 2), dqkv(rows * 3 * hd * 2);
  if (!qkv.p || !out.p || !lse.p || !dout.p || !dqkv.p) return;
  cudaMemsetAsync(qkv.p, 0, qkv.bytes, stream);
  cudaMemsetAsync(dout.p, 0, dout.bytes, stream);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const int iters = 20;
  float fwd_ms = 0, bwd_ms = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 3; ++i) {  // warm-up
      absl::Status st =
          pass == 0 ? attn.Forward(s, qkv.p, out.p, static_cast<float*>(lse.p))
                    : attn.Backward(s, qkv.p, out.p, static_cast<float*>(lse.p), dout.p, dqkv.p);
      if (!st.ok()) {
        std::printf("    %s\n", std::string(st.message()).c_str());
        return;
      }
    }
    cudaEventRecord(a, stream);
    for (int i = 0; i < iters; ++i) {
      if (pass == 0) {
        (void)attn.Forward(s, qkv.p, out.p, static_cast<float*>(lse.p));
      } else {
        (void)attn.Backward(s, qkv.p, out.p, static_cast<float*>(lse.p), dout.p, dqkv.p);
      }
    }
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(pass == 0 ? &fwd_ms : &bwd_ms, a, b);
  }
  const double flops_fwd = 4.0 * s.n * s.heads * static_cast<double>(s.tokens) * s.tokens * s.dh *
                           (s.causal ? 0.5 : 1.0);
  std::printf("    forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f TFLOP/s)\n",
              fwd_ms / iters, flops_fwd / (fwd_ms / iters * 1e-3) / 1e12, bwd_ms / iters,
              2.5 * flops_fwd / (bwd_ms / iters * 1e-3) / 1e12);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

}  // namespace

int main(int argc, char** argv) {
  const bool timing = !(argc > 1 && std::strcmp(argv[1], "--no-timing") == 0);
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no CUDA device (%s): skipped\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  cudaStream_t stream = nullptr;
  if (!CudaOk(cudaStreamCreate(&stream), "cudaStreamCreate")) return 2;

  const std::vector<CudnnAttentionShape> shapes = {
      {2, 128, 3, 64, 0.125f, true},
      {2, 128, 3, 64, 0.125f, false},
      {1, 200, 2, 128, 1.0f / std::sqrt(128.0f), true},
      {2, 64, 4, 32, 1.0f / std::sqrt(32.0f), false},
      {1, 77, 2, 64, 0.2f, true},
  };
  bool all_ok = true;
  for (const char* deterministic : {"1", "0"}) {
    setenv("STRAIT_CUDNN_ATTENTION_DETERMINISTIC", deterministic, 1);
    std::printf("STRAIT_CUDNN_ATTENTION_DETERMINISTIC=%s\n", deterministic);
    auto attn = CudnnAttention::Create(stream);
    if (!attn.ok()) {
      std::fprintf(stderr, "CudnnAttention::Create failed: %s\n",
                   std::string(attn.status().message()).c_str());
      cudaStreamDestroy(stream);
      return 2;
    }
    uint32_t seed = 1;
    for (const auto& s : shapes) all_ok &= CheckShape(**attn, stream, s, seed++);
    if (std::strcmp(deterministic, "1") == 0) {
      std::printf("  error paths\n");
      all_ok &= CheckErrors(**attn);
    }
    if (timing) {
      Time(**attn, stream, {16, 1024, 12, 64, 0.125f, true});
      Time(**attn, stream, {4, 4096, 16, 128, 1.0f / std::sqrt(128.0f), true});
    }
  }
  cudaStreamDestroy(stream);
  std::printf("%s\n", all_ok ? "PASS" : "FAIL");
  return all_ok ? 0 : 1;
}
