// GPU check of site/backend/cuda/cuda_kernels.h and attention_kernels.h against host reference
// loops that mirror site/backend/cpu (cpu_loops.cc, cpu_backend.cc): every launcher, f32, bf16 and
// mixed types, aligned (vector) and misaligned (scalar) pointers, register and streaming row
// widths, multi-chunk column reductions, determinism (two runs, same bits), then a few timings
// (--no-timings skips them). Prints one line per check and "FAILED n" / "ALL PASSED" at the end
// (exit 1 on a failure, 77 without a GPU). Built with CUDA (tests/gpu); scripts/gpu-check runs it.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/backend/cuda/attention_kernels.h"
#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/dtype.h"
#include "site/backend/op_math.h"

using namespace strait::site;

namespace {

int g_failed = 0, g_passed = 0;

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA ERROR %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, \
                  #call);                                                                     \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

cudaStream_t g_s = nullptr;

float Stored(DType t, float v) { return t == DType::kF32 ? v : Bf16Value(Bf16Bits(v)); }
const char* Name(DType t) { return t == DType::kF32 ? "f32" : "bf16"; }

// A device tensor with a host mirror of its values (already representable in its type).
// `off` elements of padding before the first element (off odd: not 16-byte aligned).
struct Tensor {
  DType t = DType::kF32;
  int64_t n = 0, off = 0;
  void* base = nullptr;
  std::vector<float> h;
  Tensor() = default;
  Tensor(DType type, int64_t count, int64_t offset = 0, bool host = true)
      : t(type), n(count), off(offset), h(host ? count : 0) {
    CK(cudaMalloc(&base, std::max<int64_t>(1, (n + off) * SizeOf(t) + 64)));
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(Tensor&& o) noexcept {
    std::swap(t, o.t), std::swap(n, o.n), std::swap(off, o.off), std::swap(base, o.base);
    std::swap(h, o.h);
    return *this;
  }
  ~Tensor() {
    if (base) cudaFree(base);
  }
  void* data() const { return static_cast<char*>(base) + off * SizeOf(t); }
  TypedPtr p() const { return TypedPtr(data(), t); }
  float* f() const { return t == DType::kF32 ? static_cast<float*>(data()) : nullptr; }
  void Random(uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    for (int64_t i = 0; i < n; ++i) h[i] = Stored(t, lo + (hi - lo) * CounterUniform(seed, i));
    Up();
  }
  void Set(float v) {
    std::fill(h.begin(), h.end(), Stored(t, v));
    Up();
  }
  void Up() {
    CK(cudaStreamSynchronize(g_s));
    if (t == DType::kF32) {
      CK(cudaMemcpy(data(), h.data(), n * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> b(n);
      for (int64_t i = 0; i < n; ++i) b[i] = Bf16Bits(h[i]);
      CK(cudaMemcpy(data(), b.data(), n * 2, cudaMemcpyHostToDevice));
    }
  }
  std::vector<float> Down() const {
    CK(cudaStreamSynchronize(g_s));
    std::vector<float> out(n);
    if (t == DType::kF32) {
      CK(cudaMemcpy(out.data(), data(), n * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> b(n);
      CK(cudaMemcpy(b.data(), data(), n * 2, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16Value(b[i]);
    }
    return out;
  }
  std::vector<uint32_t> Bits() const {  // raw bits (determinism checks)
    std::vector<float> v = Down();
    std::vector<uint32_t> b(n);
    std::memcpy(b.data(), v.data(), n * 4);
    return b;
  }
};

Tensor MakeRandom(DType t, int64_t n, uint64_t seed, int64_t off = 0, float lo = -1.0f,
                  float hi = 1.0f) {
  Tensor x(t, n, off);
  x.Random(seed, lo, hi);
  return x;
}

// |got - want| <= atol + rtol * |want| (exact when both are 0; NaN must match NaN).
bool Compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
             float atol, float rtol) {
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = got[i], w = want[i];
    bool ok;
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) && std::isnan(g);
    } else if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
    } else {
      const double err = std::fabs(double(g) - w);
      worst = std::max(worst, err / (atol + rtol * std::fabs(w) + 1e-30));
      ok = err <= atol + rtol * std::fabs(w);
    }
    if (!ok) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad) {
    ++g_failed;
    std::printf("FAIL %-70s %lld/%zu bad, first [%lld] got %.9g want %.9g\n", what.c_str(),
                (long long)bad, want.size(), (long long)first, got[first], want[first]);
  } else {
    ++g_passed;
    std::printf("ok   %-70s (worst %.3f of tolerance)\n", what.c_str(), worst);
  }
  return bad == 0;
}

bool Exact(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  return Compare(what, got, want, 0.0f, 0.0f);
}

void Expect(const std::string& what, bool ok) {
  if (ok) {
    ++g_passed;
    std::printf("ok   %s\n", what.c_str());
  } else {
    ++g_failed;
    std::printf("FAIL %s\n", what.c_str());
  }
}

// Tolerance for an output of type t computed in f32 (bf16: a rounding may land one ulp away).
float Rtol(DType t, float f32_rtol = 2e-6f) { return t == DType::kF32 ? f32_rtol : 1.0f / 128; }

void Sync(const char* what) {
  cudaError_t e = cudaStreamSynchronize(g_s);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("CUDA ERROR after %s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

void Launched(const std::string& what, cudaError_t e) {
  if (e != cudaSuccess) {
    ++g_failed;
    std::printf("FAIL %s: launcher returned %s\n", what.c_str(), cudaGetErrorString(e));
  }
  Sync(what.c_str());
}

const DType kTypes[] = {DType::kF32, DType::kBf16};

// ------------------------------------------------------------------------------------------------

void CheckFillConvert() {
  for (DType t : kTypes) {
    for (int64_t off : {0, 1}) {
      const int64_t n = 100003;
      Tensor x(t, n, off);
      Launched("fill", LaunchFill(g_s, x.p(), n, 0.3f));
      Exact(std::string("Fill ") + Name(t) + " off " + std::to_string(off), x.Down(),
            std::vector<float>(n, Stored(t, 0.3f)));
    }
  }
  for (DType a : kTypes) {
    for (DType b : kTypes) {
      for (int64_t off : {0, 3}) {
        const int64_t n = 77777;
        Tensor x = MakeRandom(a, n, 11, off, -3e4f, 3e4f);
        Tensor y(b, n, 0);
        Launched("convert", LaunchConvert(g_s, n, x.p(), y.p()));
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = Stored(b, x.h[i]);
        Exact(std::string("Convert ") + Name(a) + "->" + Name(b) + " off " + std::to_string(off),
              y.Down(), want);
      }
    }
  }
}

void CheckBiasActivation() {
  for (DType tx : kTypes) {
    for (DType ty : kTypes) {
      for (int cols : {768, 100, 13}) {
        for (int act = 0; act < 3; ++act) {
          for (bool with_bias : {true, false}) {
            for (bool alias : {false, true}) {
              if (alias && tx != ty) continue;
              const int64_t rows = 37, n = rows * cols;
              Tensor x = MakeRandom(tx, n, 21, 0, -3.0f, 3.0f);
              Tensor bias = MakeRandom(DType::kF32, cols, 22);
              Tensor y(ty, n);
              const ActivationOp op = static_cast<ActivationOp>(act);
              Launched("biasact",
                       LaunchBiasActivation(g_s, rows, cols, with_bias ? bias.f() : nullptr, op,
                                            x.p(), alias ? x.p() : y.p()));
              std::vector<float> wx(n), wy(n);
              for (int64_t i = 0; i < n; ++i) {
                float v = x.h[i] + (with_bias ? bias.h[i % cols] : 0.0f);
                wx[i] = with_bias ? Stored(tx, v) : x.h[i];
                v = op == ActivationOp::kRelu   ? (v > 0 ? v : 0)
                    : op == ActivationOp::kGelu ? Gelu(v)
                                                : v;
                wy[i] = Stored(ty, v);
              }
              const std::string what = std::string("BiasActivation ") + Name(tx) + "->" + Name(ty) +
                                       " cols " + std::to_string(cols) + " act " +
                                       std::to_string(act) + (with_bias ? " bias" : "") +
                                       (alias ? " alias" : "");
              if (alias) {
                Compare(what + " y", x.Down(), wy, 1e-6f, Rtol(ty));
              } else {
                Compare(what + " x", x.Down(), wx, 0.0f, Rtol(tx, 0.0f));
                Compare(what + " y", y.Down(), wy, 1e-6f, Rtol(ty));
              }
            }
          }
        }
      }
    }
  }
}

void CheckActivationBackward() {
  for (DType t : kTypes) {
    for (int act = 0; act < 3; ++act) {
      for (int64_t off : {0, 1}) {
        const int64_t n = 10007;
        Tensor x = MakeRandom(t, n, 31, off, -3, 3), dy = MakeRandom(t, n, 32, off);
        Tensor dx(t, n, off);
        const ActivationOp op = static_cast<ActivationOp>(act);
        Launched("actbwd", LaunchActivationBackward(g_s, n, op, x.p(), dy.p(), dx.p()));
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) {
          const float g = op == ActivationOp::kRelu   ? (x.h[i] > 0 ? dy.h[i] : 0.0f)
                          : op == ActivationOp::kGelu ? dy.h[i] * GeluGrad(x.h[i])
                                                      : dy.h[i];
          want[i] = Stored(t, g);
        }
        Compare(std::string("ActivationBackward ") + Name(t) + " act " + std::to_string(act) +
                    " off " + std::to_string(off),
                dx.Down(), want, 1e-6f, Rtol(t));
      }
    }
  }
}

// Chunked column sums vs sequential: tolerance relative to the sum of |x| of the column.
void CheckColumnSum() {
  for (DType t : kTypes) {
    for (int64_t rows : {1, 255, 256, 257, 1000, 5000}) {
      for (int cols : {768, 33, 1}) {
        for (int64_t pad : {0, 3}) {
          for (float beta : {0.0f, 0.5f}) {
            const int64_t ldx = cols + pad;
            Tensor x = MakeRandom(t, rows * ldx, 41);
            Tensor out = MakeRandom(DType::kF32, cols, 42);
            if (beta == 0.0f) out.Set(NAN);  // must not be read
            const std::vector<float> old = out.h;
            Tensor partials(DType::kF32, PartialFloats(rows, cols) + 1);
            Launched("colsum",
                     LaunchColumnSum(g_s, rows, cols, x.p(), ldx, beta, out.f(), partials.f()));
            std::vector<float> got = out.Down();
            std::vector<float> want(cols);
            float tol = 0;
            for (int c = 0; c < cols; ++c) {
              double acc = 0, mag = 0;
              for (int64_t r = 0; r < rows; ++r)
                acc += x.h[r * ldx + c], mag += std::fabs(x.h[r * ldx + c]);
              want[c] = static_cast<float>((beta == 0 ? 0.0 : beta * double(old[c])) + acc);
              tol = std::max(tol, static_cast<float>(mag * 1e-6 + 1e-6));
            }
            const std::string what = std::string("ColumnSum ") + Name(t) + " rows " +
                                     std::to_string(rows) + " cols " + std::to_string(cols) +
                                     " ld " + std::to_string(ldx) + " beta " + std::to_string(beta);
            Compare(what, got, want, tol, 1e-6f);
            // Determinism.
            if (beta == 0.0f) {
              const std::vector<uint32_t> b1 = out.Bits();
              Launched("colsum",
                       LaunchColumnSum(g_s, rows, cols, x.p(), ldx, beta, out.f(), partials.f()));
              Expect(what + " deterministic", b1 == out.Bits());
            }
          }
        }
      }
    }
  }
}

void RefLayerNorm(int64_t rows, int dim, const std::vector<float>& x, const std::vector<float>& g,
                  const std::vector<float>& b, DType ty, std::vector<float>& y,
                  std::vector<float>& mean, std::vector<float>& rstd) {
  y.resize(rows * dim), mean.resize(rows), rstd.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * dim];
    double s = 0;
    for (int c = 0; c < dim; ++c) s += xr[c];
    const double mu = s / dim;
    double v = 0;
    for (int c = 0; c < dim; ++c) v += (xr[c] - mu) * (xr[c] - mu);
    const double rs = 1.0 / std::sqrt(v / dim + kLayerNormEps);
    for (int c = 0; c < dim; ++c)
      y[r * dim + c] = Stored(ty, float((xr[c] - mu) * rs * g[c] + b[c]));
    mean[r] = float(mu), rstd[r] = float(rs);
  }
}

void CheckLayerNorm() {
  const int64_t rows = 100;
  for (int dim : {768, 1024, 1000, 1030, 2048, 4100, 8, 3}) {
    for (DType tx : kTypes) {
      for (DType ty : kTypes) {
        for (int64_t off : {0, 1}) {
          if (off && dim != 768) continue;
          const std::string shape = std::string(Name(tx)) + "->" + Name(ty) + " dim " +
                                    std::to_string(dim) + " off " + std::to_string(off);
          Tensor x = MakeRandom(tx, rows * dim, 51, off, -2.0f, 3.0f);
          Tensor gamma = MakeRandom(DType::kF32, dim, 52), beta = MakeRandom(DType::kF32, dim, 53);
          Tensor y(ty, rows * dim, off), mean(DType::kF32, rows), rstd(DType::kF32, rows);
          Launched("ln", LaunchLayerNormForward(g_s, rows, dim, x.p(), gamma.f(), beta.f(), y.p(),
                                                mean.f(), rstd.f()));
          std::vector<float> wy, wm, wr;
          RefLayerNorm(rows, dim, x.h, gamma.h, beta.h, ty, wy, wm, wr);
          Compare("LayerNorm " + shape + " y", y.Down(), wy, 2e-5f, Rtol(ty, 2e-5f));
          Compare("LayerNorm " + shape + " mean", mean.Down(), wm, 1e-6f, 1e-5f);
          Compare("LayerNorm " + shape + " rstd", rstd.Down(), wr, 0.0f, 1e-5f);

          // Residual: r = x + branch in r's type (r aliasing x, branch, or neither), LN of r.
          for (int alias = 0; alias < 3; ++alias) {
            const DType tr = alias == 0 ? ty : tx;  // aliases keep x's type
            Tensor x2 = MakeRandom(tx, rows * dim, 54, off, -2.0f, 3.0f);
            Tensor br = MakeRandom(alias == 2 ? tr : ty, rows * dim, 55, off);
            Tensor r(tr, rows * dim, off);
            Tensor y2(ty, rows * dim, off);
            std::vector<float> sum(rows * dim);
            for (int64_t i = 0; i < rows * dim; ++i) sum[i] = Stored(tr, x2.h[i] + br.h[i]);
            const TypedPtr rp = alias == 0 ? r.p() : alias == 1 ? x2.p() : br.p();
            Launched("resln",
                     LaunchResidualLayerNormForward(g_s, rows, dim, x2.p(), br.p(), rp, gamma.f(),
                                                    beta.f(), y2.p(), mean.f(), rstd.f()));
            RefLayerNorm(rows, dim, sum, gamma.h, beta.h, ty, wy, wm, wr);
            const std::string what = "ResidualLayerNorm " + shape + " alias " +
                                     std::to_string(alias) + " branch " + Name(br.t);
            Exact(what + " r", (alias == 0 ? r : alias == 1 ? x2 : br).Down(), sum);
            Compare(what + " y", y2.Down(), wy, 2e-5f, Rtol(ty, 2e-5f));
            Compare(what + " rstd", rstd.Down(), wr, 0.0f, 1e-5f);
          }
        }
      }
    }
  }
}

void CheckLayerNormBackward() {
  for (int64_t rows : {100, 600}) {
    for (int dim : {768, 1024, 1000, 1030, 2048, 8, 3}) {
      for (DType t : kTypes) {
        for (DType tdx : kTypes) {
          const std::string shape = std::string(Name(t)) + " dx " + Name(tdx) + " rows " +
                                    std::to_string(rows) + " dim " + std::to_string(dim);
          Tensor x = MakeRandom(t, rows * dim, 61, 0, -2, 3), dy = MakeRandom(t, rows * dim, 62);
          Tensor gamma = MakeRandom(DType::kF32, dim, 63);
          Tensor dx = MakeRandom(tdx, rows * dim, 64);
          Tensor dgamma = MakeRandom(DType::kF32, dim, 65),
                 dbeta = MakeRandom(DType::kF32, dim, 66);
          Tensor mean(DType::kF32, rows), rstd(DType::kF32, rows);
          for (int64_t r = 0; r < rows; ++r) {
            double s = 0, v = 0;
            for (int c = 0; c < dim; ++c) s += x.h[r * dim + c];
            const float mu = float(s / dim);
            for (int c = 0; c < dim; ++c) v += (x.h[r * dim + c] - mu) * (x.h[r * dim + c] - mu);
            mean.h[r] = mu, rstd.h[r] = float(1.0 / std::sqrt(v / dim + kLayerNormEps));
          }
          mean.Up(), rstd.Up();
          Tensor partials(DType::kF32, 2 * PartialFloats(rows, dim) + 1);
          std::vector<float> wdx = dx.h, wg = dgamma.h, wb = dbeta.h;
          std::vector<double> sg(dim, 0.0), sb(dim, 0.0);
          float gtol = 0;
          for (int64_t r = 0; r < rows; ++r) {
            const float mu = mean.h[r], rs = rstd.h[r];
            double a = 0, b = 0;
            for (int c = 0; c < dim; ++c) {
              const double dn = double(dy.h[r * dim + c]) * gamma.h[c];
              a += dn, b += dn * (x.h[r * dim + c] - mu) * rs;
            }
            a /= dim, b /= dim;
            for (int c = 0; c < dim; ++c) {
              const int64_t i = r * dim + c;
              const double norm = (x.h[i] - mu) * double(rs);
              wdx[i] =
                  Stored(tdx, float(dx.h[i] + (dy.h[i] * double(gamma.h[c]) - a - norm * b) * rs));
              sg[c] += norm * dy.h[i], sb[c] += dy.h[i];
            }
          }
          for (int c = 0; c < dim; ++c) {
            wg[c] = float(wg[c] + sg[c]), wb[c] = float(wb[c] + sb[c]);
            gtol = std::max(gtol, float(rows * 4e-6));
          }
          Launched("lnbwd",
                   LaunchLayerNormBackward(g_s, rows, dim, x.p(), gamma.f(), mean.f(), rstd.f(),
                                           dy.p(), dx.p(), dgamma.f(), dbeta.f(), partials.f()));
          Compare("LayerNormBackward " + shape + " dx", dx.Down(), wdx, 2e-4f, Rtol(tdx, 1e-4f));
          Compare("LayerNormBackward " + shape + " dgamma", dgamma.Down(), wg, gtol, 1e-5f);
          Compare("LayerNormBackward " + shape + " dbeta", dbeta.Down(), wb, gtol, 1e-5f);
        }
      }
    }
  }
}

void CheckSoftmax() {
  for (int cols : {64, 33, 1000, 1024, 2048, 3000}) {
    for (bool causal : {false, true}) {
      for (DType t : kTypes) {
        for (bool alias : {false, true}) {
          const int64_t rows = cols + 37;
          const float scale = 0.37f;
          Tensor x = MakeRandom(t, rows * cols, 71, 0, -8, 8), y(t, rows * cols);
          std::vector<float> want(rows * cols);
          for (int64_t r = 0; r < rows; ++r) {
            const int valid = causal ? int(r % cols) + 1 : cols;
            float mx = -INFINITY;
            for (int c = 0; c < valid; ++c) mx = std::max(mx, scale * x.h[r * cols + c]);
            double s = 0;
            for (int c = 0; c < valid; ++c) s += std::exp(double(scale * x.h[r * cols + c]) - mx);
            for (int c = 0; c < cols; ++c) {
              want[r * cols + c] =
                  c < valid ? Stored(t, float(std::exp(double(scale * x.h[r * cols + c]) - mx) / s))
                            : 0.0f;
            }
          }
          Launched("softmax",
                   LaunchSoftmaxRows(g_s, rows, cols, scale, causal, x.p(), alias ? x.p() : y.p()));
          const std::string what = std::string("SoftmaxRows ") + Name(t) + " cols " +
                                   std::to_string(cols) + (causal ? " causal" : "") +
                                   (alias ? " alias" : "");
          const std::vector<float> got = (alias ? x : y).Down();
          Compare(what, got, want, 1e-7f, Rtol(t, 1e-5f));

          Tensor yy(t, rows * cols), dy = MakeRandom(t, rows * cols, 72), dx(t, rows * cols);
          yy.h = got;
          yy.Up();
          std::vector<float> wdx(rows * cols);
          for (int64_t r = 0; r < rows; ++r) {
            double dot = 0;
            for (int c = 0; c < cols; ++c) dot += double(dy.h[r * cols + c]) * yy.h[r * cols + c];
            for (int c = 0; c < cols; ++c) {
              const int64_t i = r * cols + c;
              wdx[i] = Stored(t, float(scale * yy.h[i] * (dy.h[i] - dot)));
            }
          }
          Launched("softmaxbwd", LaunchSoftmaxRowsBackward(g_s, rows, cols, scale, yy.p(), dy.p(),
                                                           alias ? dy.p() : dx.p()));
          Compare(std::string("SoftmaxRowsBackward ") + Name(t) + " cols " + std::to_string(cols) +
                      (alias ? " alias" : ""),
                  (alias ? dy : dx).Down(), wdx, 1e-6f, Rtol(t, 1e-4f));
        }
      }
    }
  }
}

void CheckClassifier() {
  for (int classes : {10, 65, 1000, 50257, 50304}) {
    for (DType t : kTypes) {
      const int64_t rows = 67;
      Tensor logits = MakeRandom(t, rows * classes, 81, 0, -6, 6);
      std::vector<int32_t> labels(rows);
      for (int64_t r = 0; r < rows; ++r) labels[r] = int32_t(CounterUniform(82, r) * classes);
      labels[3] = -1, labels[5] = classes;  // ignored rows
      // Row 7: a tie for the maximum (the first one counts), at the label's position.
      {
        const int a = classes / 3, b = classes - 1;
        logits.h[7 * classes + a] = logits.h[7 * classes + b] = 7.0f;
        labels[7] = a;
        logits.h[8 * classes + a] = logits.h[8 * classes + b] = 7.0f;
        labels[8] = b;
        logits.Up();
      }
      int32_t* dlabels;
      float* dloss;
      int32_t* dcorrect;
      CK(cudaMalloc(&dlabels, rows * 4));
      CK(cudaMalloc(&dloss, rows * 4));
      CK(cudaMalloc(&dcorrect, rows * 4));
      CK(cudaMemcpy(dlabels, labels.data(), rows * 4, cudaMemcpyHostToDevice));
      const float gs = 0.25f;
      std::vector<float> wl(rows), wg(rows * classes), wc(rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float* l = &logits.h[r * classes];
        if (labels[r] < 0 || labels[r] >= classes) {
          wl[r] = 0, wc[r] = 0;
          for (int c = 0; c < classes; ++c) wg[r * classes + c] = 0;
          continue;
        }
        int am = 0;
        for (int c = 1; c < classes; ++c) am = l[c] > l[am] ? c : am;
        const float mx = l[am];
        double s = 0;
        for (int c = 0; c < classes; ++c) s += std::exp(double(l[c]) - mx);
        wl[r] = float(std::log(s) + mx - l[labels[r]]);
        wc[r] = am == labels[r];
        for (int c = 0; c < classes; ++c) {
          wg[r * classes + c] =
              Stored(t, float((std::exp(double(l[c]) - mx) / s - (c == labels[r])) * gs));
        }
      }
      Launched("classifier",
               LaunchClassifierLoss(g_s, rows, classes, logits.p(), dlabels, gs, dloss, dcorrect));
      std::vector<float> gl(rows), gc(rows);
      std::vector<int32_t> ci(rows);
      CK(cudaMemcpy(gl.data(), dloss, rows * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(ci.data(), dcorrect, rows * 4, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < rows; ++r) gc[r] = float(ci[r]);
      const std::string what =
          std::string("ClassifierLoss ") + Name(t) + " classes " + std::to_string(classes);
      Compare(what + " loss", gl, wl, 1e-5f, 1e-5f);
      Exact(what + " correct", gc, wc);
      Compare(what + " grad", logits.Down(), wg, 1e-8f, Rtol(t, 1e-4f));
      cudaFree(dlabels), cudaFree(dloss), cudaFree(dcorrect);
    }
  }
}

void CheckElementwise() {
  for (DType tx : kTypes) {
    for (DType ty : kTypes) {
      for (int64_t off : {0, 1}) {
        const int64_t n = 100001;
        const std::string sfx =
            std::string(Name(tx)) + "->" + Name(ty) + " off " + std::to_string(off);
        {
          Tensor x = MakeRandom(tx, n, 91, off), y(ty, n, off);
          Launched("dropout", LaunchDropout(g_s, n, 0.1f, 1234, 5678, x.p(), y.p()));
          std::vector<float> want(n);
          for (int64_t i = 0; i < n; ++i)
            want[i] = Stored(ty, x.h[i] * DropoutScale(0.1f, 1234, 5678 + i));
          Exact("Dropout " + sfx, y.Down(), want);
        }
        {
          Tensor x = MakeRandom(tx, n, 92, off), y = MakeRandom(ty, n, 93, off);
          std::vector<float> want(n);
          for (int64_t i = 0; i < n; ++i) want[i] = Stored(ty, y.h[i] + 0.7f * x.h[i]);
          Launched("axpy", LaunchAxpy(g_s, n, 0.7f, x.p(), y.p()));
          Compare("Axpy " + sfx, y.Down(), want, 1e-7f, Rtol(ty, 1e-6f));
        }
        {
          Tensor x = MakeRandom(tx, n, 94, off), y = MakeRandom(ty, n, 95, off);
          std::vector<float> want(n);
          for (int64_t i = 0; i < n; ++i) {
            volatile float ax = 0.7f * x.h[i], by = -0.3f * y.h[i];
            want[i] = Stored(ty, ax + by);
          }
          Launched("axpby", LaunchAxpby(g_s, n, 0.7f, x.p(), -0.3f, y.p()));
          Exact("Axpby " + sfx, y.Down(), want);
        }
      }
    }
  }
}

void CheckLayouts() {
  for (DType ts : kTypes) {
    for (DType td : kTypes) {
      const std::string sfx = std::string(Name(ts)) + "->" + Name(td);
      for (int cols : {64, 30}) {
        for (int64_t ld_src : {int64_t{0}, int64_t{cols}, int64_t{cols + 8}, int64_t{cols + 3}}) {
          const int64_t rows = 50, ld_dst = cols + 16;
          Tensor src = MakeRandom(ts, rows * std::max<int64_t>(ld_src, cols), 101);
          Tensor dst = MakeRandom(td, rows * ld_dst, 102);
          std::vector<float> want = dst.h;
          for (int64_t r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) want[r * ld_dst + c] = Stored(td, src.h[r * ld_src + c]);
          Launched("copy2d", LaunchCopy2D(g_s, rows, cols, src.p(), ld_src, dst.p(), ld_dst));
          Exact("Copy2D " + sfx + " cols " + std::to_string(cols) + " ld_src " +
                    std::to_string(ld_src),
                dst.Down(), want);
        }
      }
      for (int dh : {64, 20}) {
        const int n = 2, tokens = 37, heads = 3;
        const int64_t ldx = 3 * heads * dh + 8;
        Tensor x = MakeRandom(ts, n * tokens * ldx, 103), y(td, int64_t{n} * heads * tokens * dh);
        Launched("h2b",
                 LaunchHeadsToBatch(g_s, n, tokens, heads, dh, x.p() + heads * dh, ldx, y.p()));
        std::vector<float> want(y.n);
        for (int b = 0; b < n; ++b)
          for (int h = 0; h < heads; ++h)
            for (int t = 0; t < tokens; ++t)
              for (int j = 0; j < dh; ++j)
                want[((int64_t(b) * heads + h) * tokens + t) * dh + j] =
                    Stored(td, x.h[(int64_t(b) * tokens + t) * ldx + heads * dh + h * dh + j]);
        Exact("HeadsToBatch " + sfx + " dh " + std::to_string(dh), y.Down(), want);
        Tensor z = MakeRandom(ts, y.n, 104), back = MakeRandom(td, x.n, 105);
        std::vector<float> wb = back.h;
        for (int b = 0; b < n; ++b)
          for (int h = 0; h < heads; ++h)
            for (int t = 0; t < tokens; ++t)
              for (int j = 0; j < dh; ++j)
                wb[(int64_t(b) * tokens + t) * ldx + h * dh + j] =
                    Stored(td, z.h[((int64_t(b) * heads + h) * tokens + t) * dh + j]);
        Launched("b2h", LaunchBatchToHeads(g_s, n, tokens, heads, dh, z.p(), back.p(), ldx));
        Exact("BatchToHeads " + sfx + " dh " + std::to_string(dh), back.Down(), wb);
      }
      for (int p : {16, 4, 8, 5}) {
        const int n = 2, C = 3, H = 30 + (p == 16 ? 2 : 0), W = 32;
        const int gh = H / p, gw = W / p;
        Tensor img = MakeRandom(ts, int64_t{n} * C * H * W, 106);
        Tensor out(td, int64_t{n} * gh * gw * C * p * p);
        Launched("patches", LaunchExtractPatches(g_s, n, C, H, W, p, img.p(), out.p()));
        std::vector<float> want(out.n);
        for (int b = 0; b < n; ++b)
          for (int py = 0; py < gh; ++py)
            for (int px = 0; px < gw; ++px)
              for (int c = 0; c < C; ++c)
                for (int i = 0; i < p; ++i)
                  for (int j = 0; j < p; ++j)
                    want[((int64_t(b) * gh * gw + py * gw + px) * C + c) * p * p + i * p + j] =
                        Stored(td, img.h[((int64_t(b) * C + c) * H + py * p + i) * W + px * p + j]);
        Exact("ExtractPatches " + sfx + " p " + std::to_string(p) + " H " + std::to_string(H),
              out.Down(), want);
      }
    }
  }
}

void CheckEmbedding() {
  for (DType t : kTypes) {
    for (int dim : {768, 30}) {
      for (int vocab : {5, 50257}) {
        const int64_t rows = 3000;
        Tensor ids(DType::kF32, rows);
        for (int64_t r = 0; r < rows; ++r) ids.h[r] = std::floor(CounterUniform(111, r) * vocab);
        ids.h[4] = -1.0f, ids.h[9] = float(vocab), ids.h[10] = 2.7f, ids.h[11] = NAN;
        for (int64_t r = 100; r < 140; ++r) ids.h[r] = 3.0f;  // a long run of one id
        for (int64_t r = 200; r < 240; ++r) ids.h[r] = float(r % 2 ? 1 : 4);  // alternating
        ids.Up();
        Tensor table = MakeRandom(DType::kF32, int64_t{vocab} * dim, 112), y(t, rows * dim);
        Launched("emb", LaunchEmbeddingLookup(g_s, rows, dim, vocab, ids.f(), table.f(), y.p()));
        std::vector<float> want(rows * dim);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t id = TokenId(ids.h[r], vocab);
          for (int c = 0; c < dim; ++c)
            want[r * dim + c] = id < 0 ? 0.0f : Stored(t, table.h[id * dim + c]);
        }
        const std::string sfx = std::string(Name(t)) + " dim " + std::to_string(dim) + " vocab " +
                                std::to_string(vocab);
        Exact("EmbeddingLookup " + sfx, y.Down(), want);
        Tensor dy = MakeRandom(t, rows * dim, 113);
        std::vector<float> wt = table.h;
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t id = TokenId(ids.h[r], vocab);
          if (id < 0) continue;
          for (int c = 0; c < dim; ++c) wt[id * dim + c] += dy.h[r * dim + c];
        }
        Launched("embbwd",
                 LaunchEmbeddingBackward(g_s, rows, dim, vocab, ids.f(), dy.p(), table.f()));
        Exact("EmbeddingBackward (bit-exact, rows in order) " + sfx, table.Down(), wt);
      }
    }
  }
}

void CheckOptimizers() {
  for (int64_t off : {0, 1}) {
    for (int copy = 0; copy < 3; ++copy) {
      const int64_t n = 100003;
      const DType ct = copy == 2 ? DType::kF32 : DType::kBf16;
      const std::string sfx =
          " off " + std::to_string(off) + " copy " + (copy == 0 ? "none" : Name(ct));
      {
        Tensor p = MakeRandom(DType::kF32, n, 121, off), g = MakeRandom(DType::kF32, n, 122, off),
               v = MakeRandom(DType::kF32, n, 123, off), pc(ct, n, off);
        std::vector<float> wp = p.h, wv = v.h, wc(n);
        for (int64_t i = 0; i < n; ++i) {
          const float gg = g.h[i] * 0.5f + 0.01f * wp[i];
          wv[i] = 0.9f * wv[i] + gg;
          wp[i] -= 0.1f * wv[i];
          wc[i] = Stored(ct, wp[i]);
        }
        Launched("sgd", LaunchSgdUpdate(g_s, n, 0.1f, 0.9f, 0.01f, 0.5f, p.f(), g.f(), v.f(),
                                        copy ? pc.p() : TypedPtr()));
        Compare("Sgd param" + sfx, p.Down(), wp, 1e-6f, 1e-5f);
        Compare("Sgd velocity" + sfx, v.Down(), wv, 1e-6f, 1e-5f);
        if (copy) Compare("Sgd copy" + sfx, pc.Down(), wc, 1e-6f, Rtol(ct, 1e-5f));
      }
      {
        Tensor p = MakeRandom(DType::kF32, n, 124, off), g = MakeRandom(DType::kF32, n, 125, off),
               m = MakeRandom(DType::kF32, n, 126, off),
               v = MakeRandom(DType::kF32, n, 127, off, 0.0f, 1.0f), pc(ct, n, off);
        std::vector<float> wp = p.h, wm = m.h, wv = v.h, wc(n);
        for (int64_t i = 0; i < n; ++i) {
          const float gg = g.h[i] * 0.5f;
          wm[i] = 0.9f * wm[i] + (1 - 0.9f) * gg;
          wv[i] = 0.999f * wv[i] + (1 - 0.999f) * gg * gg;
          const float u = (wm[i] / 0.5f) / (std::sqrt(wv[i] / 0.25f) + 1e-8f);
          wp[i] -= 1e-3f * (u + 0.01f * wp[i]);
          wc[i] = Stored(ct, wp[i]);
        }
        Launched("adam",
                 LaunchAdamWUpdate(g_s, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 0.25f, 0.5f,
                                   p.f(), g.f(), m.f(), v.f(), copy ? pc.p() : TypedPtr()));
        Compare("AdamW param" + sfx, p.Down(), wp, 1e-6f, 1e-5f);
        Compare("AdamW m" + sfx, m.Down(), wm, 1e-6f, 1e-5f);
        Compare("AdamW v" + sfx, v.Down(), wv, 1e-7f, 1e-5f);
        if (copy) Compare("AdamW copy" + sfx, pc.Down(), wc, 1e-6f, Rtol(ct, 1e-5f));
      }
    }
  }
  const int64_t n = 1000003;
  Tensor x = MakeRandom(DType::kF32, n, 128);
  double* partials;
  CK(cudaMalloc(&partials, sizeof(double) * kSumSquaresBlocks));
  Launched("sumsq", LaunchSumSquares(g_s, n, x.f(), partials));
  double got = 0, got2 = 0, want = 0;
  CK(cudaMemcpy(&got, partials, 8, cudaMemcpyDeviceToHost));
  Launched("sumsq", LaunchSumSquares(g_s, n, x.f(), partials));
  CK(cudaMemcpy(&got2, partials, 8, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; ++i) want += double(x.h[i]) * x.h[i];
  Expect("SumSquares value (rel err " + std::to_string(std::fabs(got - want) / want) + ")",
         std::fabs(got - want) <= 1e-12 * want);
  Expect("SumSquares deterministic", got == got2);
  cudaFree(partials);
}

void CheckGemmEpilogue() {
  struct Case {
    const char* name;
    bool bias;
    ActivationOp act;
    bool pre;
    ActivationOp grad_of;
    bool bias_grad;
  };
  const Case cases[] = {
      {"bias", true, ActivationOp::kNone, false, ActivationOp::kNone, false},
      {"bias+gelu+pre", true, ActivationOp::kGelu, true, ActivationOp::kNone, false},
      {"relu+pre", false, ActivationOp::kRelu, true, ActivationOp::kNone, false},
      {"none", false, ActivationOp::kNone, false, ActivationOp::kNone, false},
      {"dgelu+bias_grad", false, ActivationOp::kNone, false, ActivationOp::kGelu, true},
      {"drelu+bias_grad", false, ActivationOp::kNone, false, ActivationOp::kRelu, true},
      {"dgelu", false, ActivationOp::kNone, false, ActivationOp::kGelu, false},
      {"bias_grad only", false, ActivationOp::kNone, false, ActivationOp::kNone, true},
  };
  for (const Case& k : cases) {
    for (DType tc : kTypes) {
      for (int m : {100, 600}) {
        for (int n : {768, 30}) {
          for (int pad : {0, 8, 1}) {
            const int ldc = n + pad;
            Tensor t = MakeRandom(DType::kF32, int64_t{m} * n, 131, 0, -3, 3);
            Tensor bias = MakeRandom(DType::kF32, n, 132);
            Tensor c = MakeRandom(tc, int64_t{m} * ldc, 133),
                   pre = MakeRandom(tc, int64_t{m} * ldc, 134);
            Tensor in = MakeRandom(tc, int64_t{m} * ldc, 135, 0, -3, 3);
            Tensor bg = MakeRandom(DType::kF32, n, 136);
            Tensor partials(DType::kF32, PartialFloats(m, n) + 1);
            GemmEpilogue e;
            if (k.bias) e.bias = bias.f();
            e.act = k.act;
            if (k.pre) e.pre = pre.p();
            e.grad_of = k.grad_of;
            if (k.grad_of != ActivationOp::kNone) e.act_input = in.p();
            if (k.bias_grad) e.bias_grad = bg.f();
            std::vector<float> wc = c.h, wpre = pre.h, wbg = bg.h;
            std::vector<double> sums(n, 0.0);
            for (int r = 0; r < m; ++r) {
              for (int j = 0; j < n; ++j) {
                float v = t.h[int64_t(r) * n + j];
                if (k.bias) v += tc == DType::kBf16 ? RoundToBf16(bias.h[j]) : bias.h[j];
                if (k.pre) wpre[int64_t(r) * ldc + j] = Stored(tc, v);
                if (k.act == ActivationOp::kRelu) v = v > 0 ? v : 0;
                if (k.act == ActivationOp::kGelu) v = Gelu(v);
                const float xin = in.h[int64_t(r) * ldc + j];
                if (k.grad_of == ActivationOp::kGelu) v = v * GeluGrad(xin);
                if (k.grad_of == ActivationOp::kRelu) v = xin > 0 ? v : 0;
                wc[int64_t(r) * ldc + j] = Stored(tc, v);
                sums[j] += Stored(tc, v);  // the bias gradient sums C as stored
              }
            }
            for (int j = 0; j < n; ++j) wbg[j] = float(wbg[j] + sums[j]);
            Launched("epilogue", LaunchGemmEpilogue(g_s, m, n, t.f(), ldc, e, c.p(), partials.f()));
            const std::string what = std::string("GemmEpilogue ") + k.name + " " + Name(tc) +
                                     " m " + std::to_string(m) + " n " + std::to_string(n) +
                                     " ldc " + std::to_string(ldc);
            // GELU' adds terms of up to ~1.2 that cancel near its zero (x ~ -0.75), and the
            // device contracts them into fused multiply-adds where the host does not: a few float
            // steps of GELU' (~1e-6) times the product (|t| <= 3 here).
            const float atol = k.grad_of == ActivationOp::kGelu ? 1e-5f : 1e-6f;
            Compare(what + " c", c.Down(), wc, atol, Rtol(tc, 1e-5f));
            if (k.pre) Compare(what + " pre", pre.Down(), wpre, 0.0f, Rtol(tc, 0.0f));
            // Beside a bf16 C the bias gradient sums the stored values: where the device's
            // fused multiply-adds move v across a rounding boundary its stored value moves one
            // bf16 step (2^-8 of |v|); a few such steps per column are allowed.
            float max_v = 0.0f;
            for (float v : wc) max_v = std::max(max_v, std::abs(v));
            const float bg_atol = m * 1e-5f + (tc == DType::kBf16 ? 4 * max_v / 256 : 0.0f);
            if (k.bias_grad) Compare(what + " bias_grad", bg.Down(), wbg, bg_atol, 1e-5f);
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Attention: f32, interleaved layout, against double-precision loops.

void CheckAttention() {
  struct Shape {
    int n, tokens, heads, dh;
    bool causal;
  };
  const Shape shapes[] = {{2, 70, 3, 64, true},   {2, 70, 3, 24, false},  {1, 33, 2, 8, true},
                          {2, 130, 2, 128, true}, {1, 100, 3, 72, false}, {2, 257, 4, 96, true},
                          {1, 64, 1, 40, false},  {3, 1, 2, 16, true},    {1, 129, 2, 120, false}};
  for (const Shape& sh : shapes) {
    AttentionDims d;
    d.n = sh.n, d.tokens = sh.tokens, d.heads = sh.heads, d.dh = sh.dh, d.causal = sh.causal;
    d.scale = 1.0f / std::sqrt(float(sh.dh));
    const int64_t W = d.width(), rows = d.rows(), T = sh.tokens, H = sh.heads, DH = sh.dh;
    Tensor qkv = MakeRandom(DType::kF32, rows * 3 * W, 141, 0, -2, 2);
    Tensor out(DType::kF32, rows * W), lse(DType::kF32, d.queries());
    Tensor dout = MakeRandom(DType::kF32, rows * W, 142), delta(DType::kF32, d.queries());
    Tensor dqkv(DType::kF32, rows * 3 * W);
    dqkv.Set(NAN);  // every element must be written
    auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t j) {
      return qkv.h[(b * T + t) * 3 * W + h * DH + j];
    };
    auto K = [&](int64_t b, int64_t t, int64_t h, int64_t j) {
      return qkv.h[(b * T + t) * 3 * W + W + h * DH + j];
    };
    auto V = [&](int64_t b, int64_t t, int64_t h, int64_t j) {
      return qkv.h[(b * T + t) * 3 * W + 2 * W + h * DH + j];
    };
    std::vector<float> wo(rows * W), wl(d.queries()), wdqkv(rows * 3 * W, 0.0f);
    for (int64_t b = 0; b < sh.n; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> P(T * T, 0.0), lse_h(T), o(T * DH, 0.0);
        for (int64_t i = 0; i < T; ++i) {
          const int64_t keys = sh.causal ? i + 1 : T;
          double mx = -1e300;
          std::vector<double> s(keys);
          for (int64_t j = 0; j < keys; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < DH; ++c) dot += double(Q(b, i, h, c)) * K(b, j, h, c);
            s[j] = d.scale * dot;
            mx = std::max(mx, s[j]);
          }
          double l = 0;
          for (int64_t j = 0; j < keys; ++j) l += std::exp(s[j] - mx);
          lse_h[i] = mx + std::log(l);
          for (int64_t j = 0; j < keys; ++j) P[i * T + j] = std::exp(s[j] - mx) / l;
          for (int64_t c = 0; c < DH; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < keys; ++j) acc += P[i * T + j] * V(b, j, h, c);
            o[i * DH + c] = acc;
            wo[(b * T + i) * W + h * DH + c] = float(acc);
          }
          wl[(b * H + h) * T + i] = float(lse_h[i]);
        }
        // Backward.
        std::vector<double> dlt(T, 0.0);
        for (int64_t i = 0; i < T; ++i)
          for (int64_t c = 0; c < DH; ++c)
            dlt[i] += double(dout.h[(b * T + i) * W + h * DH + c]) * o[i * DH + c];
        for (int64_t i = 0; i < T; ++i) {
          for (int64_t j = 0; j < T; ++j) {
            const double p = P[i * T + j];
            if (p == 0.0) continue;
            double dp = 0;
            for (int64_t c = 0; c < DH; ++c)
              dp += double(dout.h[(b * T + i) * W + h * DH + c]) * V(b, j, h, c);
            const double ds = p * (dp - dlt[i]) * d.scale;
            for (int64_t c = 0; c < DH; ++c) {
              wdqkv[(b * T + i) * 3 * W + h * DH + c] += float(ds * K(b, j, h, c));
              wdqkv[(b * T + j) * 3 * W + W + h * DH + c] += float(ds * Q(b, i, h, c));
              wdqkv[(b * T + j) * 3 * W + 2 * W + h * DH + c] +=
                  float(p * dout.h[(b * T + i) * W + h * DH + c]);
            }
          }
        }
      }
    }
    char name[128];
    std::snprintf(name, sizeof name, "Attention n %d T %d H %d dh %d %s", sh.n, sh.tokens, sh.heads,
                  sh.dh, sh.causal ? "causal" : "full");
    Launched(name, LaunchFusedAttentionForward(g_s, d, qkv.f(), out.f(), lse.f()));
    Compare(std::string(name) + " out", out.Down(), wo, 2e-5f, 1e-4f);
    Compare(std::string(name) + " lse", lse.Down(), wl, 2e-5f, 1e-5f);
    Launched(name, LaunchFusedAttentionBackward(g_s, d, qkv.f(), out.f(), lse.f(), dout.f(),
                                                delta.f(), dqkv.f()));
    float scale = 0;
    for (float v : wdqkv) scale = std::max(scale, std::fabs(v));
    Compare(std::string(name) + " dqkv", dqkv.Down(), wdqkv, 2e-5f * scale + 1e-6f, 1e-4f);
    const std::vector<uint32_t> b1 = dqkv.Bits();
    Launched(name, LaunchFusedAttentionBackward(g_s, d, qkv.f(), out.f(), lse.f(), dout.f(),
                                                delta.f(), dqkv.f()));
    Expect(std::string(name) + " backward deterministic", b1 == dqkv.Bits());
  }
  AttentionDims bad;
  bad.n = 1, bad.tokens = 8, bad.heads = 1, bad.dh = 136;
  Expect("Attention dh 136 rejected",
         LaunchFusedAttentionForward(g_s, bad, nullptr, nullptr, nullptr) == cudaErrorInvalidValue);
  cudaGetLastError();
}

// ------------------------------------------------------------------------------------------------

// A device-only tensor with values in {0, 1/(1-p)} (timings only).
Tensor Dev(DType t, int64_t n, uint64_t key = 1) {
  Tensor x(t, n, 0, false);
  CK(LaunchFill(g_s, x.p(), n, 1.0f));
  CK(LaunchDropout(g_s, n, 0.3f, key, 0, x.p(), x.p()));
  return x;
}

double TimeMs(const std::function<cudaError_t()>& f, int iters = 20) {
  CK(f());
  Sync("warmup");
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, g_s));
  for (int i = 0; i < iters; ++i) CK(f());
  CK(cudaEventRecord(b, g_s));
  Sync("timing");
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms / iters;
}

void Timings() {
  std::printf("\n-- timings (ms per call; GB/s counts each tensor read or written once) --\n");
  const DType bf = DType::kBf16;
  {
    const int64_t rows = 16384;
    const int dim = 768;
    Tensor x = Dev(bf, rows * dim, 1), y(bf, rows * dim, 0, false), br = Dev(bf, rows * dim, 2);
    Tensor g = Dev(DType::kF32, dim, 3), b = Dev(DType::kF32, dim, 4);
    Tensor mean(DType::kF32, rows, 0, false), rstd(DType::kF32, rows, 0, false),
        dx = Dev(bf, rows * dim, 5);
    Tensor dg(DType::kF32, dim, 0, false), db(DType::kF32, dim, 0, false),
        part(DType::kF32, 2 * PartialFloats(rows, dim), 0, false);
    const double bytes = rows * dim * 2.0;
    double ms = TimeMs([&] {
      return LaunchLayerNormForward(g_s, rows, dim, x.p(), g.f(), b.f(), y.p(), mean.f(), rstd.f());
    });
    std::printf("LayerNormForward bf16 16384x768        %.4f ms  %.0f GB/s\n", ms,
                2 * bytes / ms / 1e6);
    ms = TimeMs([&] {
      return LaunchResidualLayerNormForward(g_s, rows, dim, x.p(), br.p(), x.p(), g.f(), b.f(),
                                            y.p(), mean.f(), rstd.f());
    });
    std::printf("ResidualLayerNorm bf16 16384x768       %.4f ms  %.0f GB/s\n", ms,
                4 * bytes / ms / 1e6);
    ms = TimeMs([&] {
      return LaunchLayerNormBackward(g_s, rows, dim, x.p(), g.f(), mean.f(), rstd.f(), br.p(),
                                     dx.p(), dg.f(), db.f(), part.f());
    });
    std::printf("LayerNormBackward bf16 16384x768       %.4f ms  %.0f GB/s (x,dy twice; dx rw)\n",
                ms, 6 * bytes / ms / 1e6);
    ms =
        TimeMs([&] { return LaunchColumnSum(g_s, rows, dim, x.p(), dim, 1.0f, dg.f(), part.f()); });
    std::printf("ColumnSum bf16 16384x768               %.4f ms  %.0f GB/s\n", ms,
                bytes / ms / 1e6);
  }
  {
    const int64_t rows = 8 * 12 * 1024;
    const int cols = 1024;
    Tensor x = Dev(bf, rows * cols, 6), y(bf, rows * cols, 0, false), dy = Dev(bf, rows * cols, 7);
    const double bytes = rows * cols * 2.0;
    double ms =
        TimeMs([&] { return LaunchSoftmaxRows(g_s, rows, cols, 0.125f, true, x.p(), y.p()); });
    std::printf("SoftmaxRows causal bf16 98304x1024     %.4f ms  %.0f GB/s\n", ms,
                2 * bytes / ms / 1e6);
    ms = TimeMs(
        [&] { return LaunchSoftmaxRowsBackward(g_s, rows, cols, 0.125f, y.p(), dy.p(), x.p()); });
    std::printf("SoftmaxRowsBackward bf16 98304x1024    %.4f ms  %.0f GB/s\n", ms,
                3 * bytes / ms / 1e6);
  }
  {
    const int64_t rows = 8192;
    const int classes = 50304;
    Tensor logits = Dev(bf, rows * classes, 8);
    std::vector<int32_t> labels(rows, 17);
    int32_t *dl, *dc;
    float* loss;
    CK(cudaMalloc(&dl, rows * 4));
    CK(cudaMalloc(&dc, rows * 4));
    CK(cudaMalloc(&loss, rows * 4));
    CK(cudaMemcpy(dl, labels.data(), rows * 4, cudaMemcpyHostToDevice));
    const double ms = TimeMs(
        [&] { return LaunchClassifierLoss(g_s, rows, classes, logits.p(), dl, 1.0f, loss, dc); },
        5);
    std::printf(
        "ClassifierLoss bf16 8192x50304         %.4f ms  %.0f GB/s (read twice, write once)\n", ms,
        3 * rows * classes * 2.0 / ms / 1e6);
    cudaFree(dl), cudaFree(dc), cudaFree(loss);
  }
  {
    const int64_t rows = 16384;
    const int dim = 768;
    for (int vocab : {50257, 65}) {
      Tensor ids(DType::kF32, rows);
      for (int64_t r = 0; r < rows; ++r) ids.h[r] = std::floor(CounterUniform(9, r) * vocab);
      ids.Up();
      Tensor dy = Dev(bf, rows * dim, 10), table(DType::kF32, int64_t{vocab} * dim, 0, false);
      CK(LaunchFill(g_s, table.p(), table.n, 0.0f));
      const double ms = TimeMs(
          [&] {
            return LaunchEmbeddingBackward(g_s, rows, dim, vocab, ids.f(), dy.p(), table.f());
          },
          5);
      std::printf("EmbeddingBackward bf16 16384x768 V=%-6d %.4f ms\n", vocab, ms);
    }
  }
  {
    const int64_t n = 124000000;
    Tensor p = Dev(DType::kF32, n, 11), g = Dev(DType::kF32, n, 12), m(DType::kF32, n, 0, false),
           v(DType::kF32, n, 0, false), pc(bf, n, 0, false);
    CK(LaunchFill(g_s, m.p(), n, 0.0f));
    CK(LaunchFill(g_s, v.p(), n, 0.0f));
    const double ms = TimeMs(
        [&] {
          return LaunchAdamWUpdate(g_s, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.5f, 1.0f, p.f(),
                                   g.f(), m.f(), v.f(), pc.p());
        },
        5);
    std::printf("AdamW 124M + bf16 copy                 %.4f ms  %.0f GB/s\n", ms,
                n * (4.0 * 7 + 2) / ms / 1e6);
  }
  {
    AttentionDims d;
    d.n = 8, d.tokens = 1024, d.heads = 12, d.dh = 64, d.causal = true, d.scale = 0.125f;
    Tensor qkv = Dev(DType::kF32, d.rows() * 3 * d.width(), 13),
           out(DType::kF32, d.rows() * d.width(), 0, false);
    Tensor lse(DType::kF32, d.queries(), 0, false),
        dout = Dev(DType::kF32, d.rows() * d.width(), 14);
    Tensor delta(DType::kF32, d.queries(), 0, false),
        dqkv(DType::kF32, d.rows() * 3 * d.width(), 0, false);
    double ms =
        TimeMs([&] { return LaunchFusedAttentionForward(g_s, d, qkv.f(), out.f(), lse.f()); }, 5);
    const double flops = 4.0 * d.n * d.heads * double(d.tokens) * d.tokens * d.dh / 2;  // causal
    std::printf("FusedAttentionForward f32 8x1024x12x64 causal  %.4f ms  %.1f TFLOP/s\n", ms,
                flops / ms / 1e9);
    ms = TimeMs(
        [&] {
          return LaunchFusedAttentionBackward(g_s, d, qkv.f(), out.f(), lse.f(), dout.f(),
                                              delta.f(), dqkv.f());
        },
        5);
    std::printf("FusedAttentionBackward f32 8x1024x12x64 causal %.4f ms  %.1f TFLOP/s\n", ms,
                2.5 * flops / ms / 1e9);
    d.dh = 128, d.heads = 6;
    ms = TimeMs([&] { return LaunchFusedAttentionForward(g_s, d, qkv.f(), out.f(), lse.f()); }, 5);
    std::printf("FusedAttentionForward f32 8x1024x6x128 causal  %.4f ms\n", ms);
    ms = TimeMs(
        [&] {
          return LaunchFusedAttentionBackward(g_s, d, qkv.f(), out.f(), lse.f(), dout.f(),
                                              delta.f(), dqkv.f());
        },
        5);
    std::printf("FusedAttentionBackward f32 8x1024x6x128 causal %.4f ms\n", ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  const auto t0 = std::chrono::steady_clock::now();
  CheckFillConvert();
  CheckBiasActivation();
  CheckActivationBackward();
  CheckColumnSum();
  CheckLayerNorm();
  CheckLayerNormBackward();
  CheckSoftmax();
  CheckClassifier();
  CheckElementwise();
  CheckLayouts();
  CheckEmbedding();
  CheckOptimizers();
  CheckGemmEpilogue();
  CheckAttention();
  std::printf("\nchecks: %d passed, %d failed (%.1f s)\n", g_passed, g_failed,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (argc < 2 || std::string(argv[1]) != "--no-timings") Timings();
  std::printf(g_failed ? "FAILED %d\n" : "ALL PASSED\n", g_failed);
  return g_failed ? 1 : 0;
}
