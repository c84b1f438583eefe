// GPU check of strait::site::LtMatmul (site/backend/cuda/lt_matmul.{h,cc}): every epilogue x
// transpose x type combination on random data against a naive double-precision CPU reference.
// Prints one line per case with the max errors normalised by the reference's max magnitude, a
// summary, then a few timings. Exit 0: every supported case passes; 1: a case failed; 77: no GPU
// (skipped); 2: setup failure. Built with CUDA (tests/gpu); scripts/gpu-check runs it.
#include <cuda_runtime.h>
#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "site/backend/cuda/lt_matmul.h"
#include "site/backend/dtype.h"

using strait::site::AlgorithmChoice;
using strait::site::Bf16Bits;
using strait::site::Bf16Value;
using strait::site::DType;
using strait::site::LtEpilogue;
using strait::site::LtMatmul;
using strait::site::LtProduct;

namespace {

#define CUDA_OR_DIE(call)                                                  \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) {                                               \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
              cudaGetErrorString(e_));                                     \
      exit(2);                                                             \
    }                                                                      \
  } while (0)

const char* Name(DType t) { return t == DType::kF32 ? "f32" : "bf16"; }

uint64_t rng_state = 0x12345678abcdefull;
float Uniform() {  // [-1, 1)
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

// Host values as stored on the device (rounded to `t`), and their device copy.
struct Buffer {
  DType type = DType::kF32;
  std::vector<float> host;  // the exact values of the stored elements
  char* base = nullptr;     // cudaMalloc'd
  size_t offset_bytes = 0;  // for misalignment tests
  void* ptr() const { return base + offset_bytes; }

  Buffer(DType t, size_t n, float scale, size_t offset_elems = 0) : type(t), host(n) {
    for (float& v : host) {
      v = Uniform() * scale;
      if (t == DType::kBf16) v = Bf16Value(Bf16Bits(v));
    }
    offset_bytes = offset_elems * strait::site::SizeOf(t);
    CUDA_OR_DIE(cudaMalloc(&base, n * strait::site::SizeOf(t) + offset_bytes + 256));
    Upload();
  }
  ~Buffer() { cudaFree(base); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void Upload() {
    if (type == DType::kF32) {
      CUDA_OR_DIE(cudaMemcpy(ptr(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < host.size(); ++i) bits[i] = Bf16Bits(host[i]);
      CUDA_OR_DIE(cudaMemcpy(ptr(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    }
  }
  std::vector<float> Download() const {
    std::vector<float> out(host.size());
    if (type == DType::kF32) {
      CUDA_OR_DIE(cudaMemcpy(out.data(), ptr(), out.size() * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> bits(out.size());
      CUDA_OR_DIE(cudaMemcpy(bits.data(), ptr(), bits.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16Value(bits[i]);
    }
    return out;
  }
};

double GeluTanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double GeluTanhGrad(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  const double th = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3.0 * 0.044715 * x * x);
}
double GeluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double GeluErfGrad(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

enum class Epi { kNone, kBias, kGelu, kGeluBias, kGeluAux, kGeluAuxBias, kDGelu, kDGeluBGrad };
const char* EpiName(Epi e) {
  static const char* names[] = {"none",     "bias",          "gelu",  "gelu+bias",
                                "gelu+aux", "gelu+aux+bias", "dgelu", "dgelu+bgrad"};
  return names[static_cast<int>(e)];
}
bool IsGelu(Epi e) {
  return e == Epi::kGelu || e == Epi::kGeluBias || e == Epi::kGeluAux || e == Epi::kGeluAuxBias;
}
bool IsDGelu(Epi e) { return e == Epi::kDGelu || e == Epi::kDGeluBGrad; }
bool HasBias(Epi e) { return e == Epi::kBias || e == Epi::kGeluBias || e == Epi::kGeluAuxBias; }
bool HasAux(Epi e) { return e == Epi::kGeluAux || e == Epi::kGeluAuxBias || IsDGelu(e); }

struct Case {
  DType ab = DType::kBf16, c = DType::kBf16, aux = DType::kBf16, bias = DType::kF32;
  bool ta = false, tb = false;
  int m = 80, n = 136, k = 72, pad = 0, batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  Epi epi = Epi::kNone;
  int misalign_a = 0, misalign_c = 0;  // element offsets
};

double Tolerance(DType t, DType ab) {
  if (t == DType::kBf16) return 1.2e-2;    // one bf16 rounding (2^-9) relative to the max, plus
  return ab == DType::kF32 ? 2e-5 : 1e-4;  // f32 accumulation; TF32 would be ~1e-3
}

double MaxRel(const std::vector<float>& got, const std::vector<double>& ref) {
  double max_ref = 1e-30, max_err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= max_err)) max_err = err;  // NaN propagates
  }
  return max_err / max_ref;
}

int failures = 0, unsupported = 0, passed = 0;
std::vector<std::string> unsupported_list;

void RunCase(LtMatmul& lt, const Case& cs) {
  const int m = cs.m, n = cs.n, k = cs.k, B = cs.batch;
  const int lda = (cs.ta ? m : k) + cs.pad, ldb = (cs.tb ? k : n) + cs.pad, ldc = n + cs.pad;
  const int64_t sa = static_cast<int64_t>(cs.ta ? k : m) * lda + (B > 1 ? 16 : 0);
  const int64_t sb = static_cast<int64_t>(cs.tb ? n : k) * ldb + (B > 1 ? 16 : 0);
  const int64_t sc = static_cast<int64_t>(m) * ldc + (B > 1 ? 16 : 0);
  const int ld_aux = (n + 7) / 8 * 8 + (cs.pad ? 8 : 0);

  Buffer A(cs.ab, static_cast<size_t>(sa) * B, 1.0f, cs.misalign_a);
  Buffer Bm(cs.ab, static_cast<size_t>(sb) * B, 1.0f);
  Buffer C(cs.c, static_cast<size_t>(sc) * B, 1.0f, cs.misalign_c);
  Buffer bias(cs.bias, n, 0.5f);
  Buffer bgrad(DType::kF32, n, 1.0f);                         // garbage: must be overwritten
  Buffer aux(cs.aux, static_cast<size_t>(m) * ld_aux, 2.0f);  // dgelu: the pre-activation input

  LtProduct p;
  p.trans_a = cs.ta;
  p.trans_b = cs.tb;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = A.ptr();
  p.lda = lda;
  p.b = Bm.ptr();
  p.ldb = ldb;
  p.c = C.ptr();
  p.ldc = ldc;
  p.ab = cs.ab;
  p.c_type = cs.c;
  p.alpha = cs.alpha;
  p.beta = cs.beta;
  p.batch = B;
  p.stride_a = sa;
  p.stride_b = sb;
  p.stride_c = sc;
  LtEpilogue e;
  if (HasBias(cs.epi)) e.bias = bias.ptr(), e.bias_type = cs.bias;
  e.gelu = IsGelu(cs.epi);
  e.dgelu = IsDGelu(cs.epi);
  if (HasAux(cs.epi)) {
    e.aux = aux.ptr();
    e.aux_type = cs.aux;
    e.ld_aux = ld_aux;
  }
  if (cs.epi == Epi::kDGeluBGrad) e.bias_grad = static_cast<float*>(bgrad.ptr());

  char label[256];
  snprintf(label, sizeof label,
           "ab=%-4s c=%-4s ta=%d tb=%d m=%d n=%d k=%d pad=%d batch=%d a=%g b=%g %-13s aux=%-4s "
           "bias=%-4s%s%s",
           Name(cs.ab), Name(cs.c), cs.ta, cs.tb, m, n, k, cs.pad, B, cs.alpha, cs.beta,
           EpiName(cs.epi), HasAux(cs.epi) ? Name(cs.aux) : "-",
           HasBias(cs.epi) ? Name(cs.bias) : "-", cs.misalign_a ? " misalignA" : "",
           cs.misalign_c ? " misalignC" : "");

  const bool supported = lt.Supports(p, e);
  const absl::Status st = lt.Run(p, e);
  if (!supported || !st.ok()) {
    if (supported) {
      printf("FAIL  %s: Supports() true but Run: %s\n", label, st.ToString().c_str());
      ++failures;
    } else if (st.ok()) {
      printf("FAIL  %s: Supports() false but Run OK\n", label);
      ++failures;
    } else {
      printf("UNSUP %s: %s\n", label, st.ToString().c_str());
      ++unsupported;
      unsupported_list.push_back(label);
    }
    return;
  }
  const cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) {
    printf("FAIL  %s: kernel error %s\n", label, cudaGetErrorString(sync));
    ++failures;
    exit(1);  // the context is likely dead
  }

  // Reference (double), over the valid [m, n] region of each batch; padding must be untouched.
  const std::vector<float> got_c = C.Download();
  std::vector<double> ref_c(got_c.size()), ref_c_erf(got_c.size()), ref_aux, ref_bgrad(n, 0.0),
      ref_bgrad_erf(n, 0.0);
  std::vector<float> got_c_cmp(got_c.size());
  const std::vector<float> got_aux = aux.Download();
  if (HasAux(cs.epi)) ref_aux.assign(aux.host.begin(), aux.host.end());
  for (int bi = 0; bi < B; ++bi) {
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double prod = 0.0;
        for (int l = 0; l < k; ++l) {
          const double a = A.host[bi * sa + (cs.ta ? static_cast<int64_t>(l) * lda + i
                                                   : static_cast<int64_t>(i) * lda + l)];
          const double b = Bm.host[bi * sb + (cs.tb ? static_cast<int64_t>(j) * ldb + l
                                                    : static_cast<int64_t>(l) * ldb + j)];
          prod += a * b;
        }
        const size_t ci = bi * sc + static_cast<size_t>(i) * ldc + j;
        double t = cs.alpha * prod + cs.beta * static_cast<double>(C.host[ci]);
        if (HasBias(cs.epi)) t += bias.host[j];
        double out = t, out_erf = t;
        if (IsGelu(cs.epi)) {
          out = GeluTanh(t);
          out_erf = GeluErf(t);
          if (HasAux(cs.epi)) ref_aux[static_cast<size_t>(i) * ld_aux + j] = t;
        } else if (IsDGelu(cs.epi)) {
          const double x = aux.host[static_cast<size_t>(i) * ld_aux + j];
          out = cs.alpha * prod * GeluTanhGrad(x);
          out_erf = cs.alpha * prod * GeluErfGrad(x);
          ref_bgrad[j] += out;
          ref_bgrad_erf[j] += out_erf;
        }
        ref_c[ci] = out;
        ref_c_erf[ci] = out_erf;
      }
    }
  }
  // Elements outside the [m, n] windows (padding, batch gaps) must be unchanged.
  std::vector<char> inside(got_c.size(), 0);
  for (int bi = 0; bi < B; ++bi)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) inside[bi * sc + static_cast<size_t>(i) * ldc + j] = 1;
  bool padding_ok = true;
  for (size_t i = 0; i < got_c.size(); ++i) {
    if (!inside[i]) {
      ref_c[i] = ref_c_erf[i] = C.host[i];
      if (got_c[i] != C.host[i]) padding_ok = false;
    }
  }
  const double tol_c = Tolerance(cs.c, cs.ab);
  const double err_c = MaxRel(got_c, ref_c);
  const double err_c_erf = MaxRel(got_c, ref_c_erf);
  bool ok = err_c <= tol_c && padding_ok;
  char extra[256] = "";
  if (HasAux(cs.epi) && IsGelu(cs.epi)) {
    const double err_aux = MaxRel(got_aux, ref_aux);
    ok = ok && err_aux <= Tolerance(cs.aux, cs.ab);
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " aux=%.2e", err_aux);
  }
  if (IsDGelu(cs.epi)) {  // aux is an input: must be unchanged
    bool aux_same = got_aux == aux.host;
    ok = ok && aux_same;
    if (!aux_same) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " AUX-CHANGED");
  }
  if (cs.epi == Epi::kDGeluBGrad) {
    const std::vector<float> got_b = bgrad.Download();
    const double err_b = MaxRel(got_b, ref_bgrad);
    const double err_b_erf = MaxRel(got_b, ref_bgrad_erf);
    ok = ok && err_b <= Tolerance(cs.c, cs.ab);
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " bgrad=%.2e (erf-ref %.2e)",
             err_b, err_b_erf);
  }
  if (IsGelu(cs.epi) || IsDGelu(cs.epi)) {
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (C vs erf-GELU ref %.2e)",
             err_c_erf);
  }
  printf("%s  %s: C=%.2e (tol %.0e)%s%s\n", ok ? "PASS" : "FAIL", label, err_c, tol_c, extra,
         padding_ok ? "" : " PADDING-CHANGED");
  ok ? ++passed : ++failures;
}

void ExpectError(LtMatmul& lt, const char* what, const LtProduct& p, const LtEpilogue& e,
                 absl::StatusCode code) {
  const absl::Status st = lt.Run(p, e);
  const bool ok = st.code() == code && !lt.Supports(p, e);
  printf("%s  validation: %s -> %s\n", ok ? "PASS" : "FAIL", what, st.ToString().c_str());
  ok ? ++passed : ++failures;
}

void Timing(LtMatmul& lt, cudaStream_t stream, DType ab, DType c, int m, int n, int k, Epi epi) {
  Buffer A(ab, static_cast<size_t>(m) * k, 1.0f), Bm(ab, static_cast<size_t>(k) * n, 1.0f),
      C(c, static_cast<size_t>(m) * n, 1.0f), bias(c, n, 1.0f),
      aux(c, static_cast<size_t>(m) * n, 1.0f);
  LtProduct p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = A.ptr();
  p.lda = k;
  p.b = Bm.ptr();
  p.ldb = n;
  p.c = C.ptr();
  p.ldc = n;
  p.ab = ab;
  p.c_type = c;
  LtEpilogue e;
  if (epi == Epi::kGeluAuxBias) {
    e.bias = bias.ptr(), e.bias_type = c;
    e.gelu = true;
    e.aux = aux.ptr();
    e.aux_type = c;
    e.ld_aux = n;
  }
  if (!lt.Supports(p, e)) {
    printf("time  ab=%s c=%s %dx%dx%d %s: unsupported\n", Name(ab), Name(c), m, n, k, EpiName(epi));
    return;
  }
  for (int i = 0; i < 3; ++i) (void)lt.Run(p, e);
  cudaEvent_t t0, t1;
  CUDA_OR_DIE(cudaEventCreate(&t0));
  CUDA_OR_DIE(cudaEventCreate(&t1));
  const int iters = 20;
  CUDA_OR_DIE(cudaEventRecord(t0, stream));
  for (int i = 0; i < iters; ++i) {
    absl::Status s = lt.Run(p, e);
    if (!s.ok()) {
      printf("time: %s\n", s.ToString().c_str());
      return;
    }
  }
  CUDA_OR_DIE(cudaEventRecord(t1, stream));
  CUDA_OR_DIE(cudaEventSynchronize(t1));
  float ms = 0;
  CUDA_OR_DIE(cudaEventElapsedTime(&ms, t0, t1));
  const double tflops = 2.0 * m * n * k * iters / (ms * 1e-3) / 1e12;
  printf("time  ab=%s c=%s %dx%dx%d %-13s: %.3f ms/iter, %.1f TFLOP/s\n", Name(ab), Name(c), m, n,
         k, EpiName(epi), ms / iters, tflops);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t dc = cudaGetDeviceCount(&count);
  if (dc != cudaSuccess || count == 0) {
    fprintf(stderr, "lt_matmul_check: no usable CUDA device (%s): skipped\n",
            dc != cudaSuccess ? cudaGetErrorString(dc) : "device count 0");
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s (sm_%d%d), cublasLt version %zu\n", prop.name, prop.major, prop.minor,
         cublasLtGetVersion());
  cudaStream_t stream;
  CUDA_OR_DIE(cudaStreamCreate(&stream));
  absl::StatusOr<std::unique_ptr<LtMatmul>> created = LtMatmul::Create(stream);
  if (!created.ok()) {
    fprintf(stderr, "lt_matmul_check: LtMatmul::Create: %s\n", created.status().ToString().c_str());
    return 2;
  }
  LtMatmul& lt = **created;

  const DType types[] = {DType::kBf16, DType::kF32};
  const Epi epis[] = {Epi::kNone,    Epi::kBias,        Epi::kGelu,  Epi::kGeluBias,
                      Epi::kGeluAux, Epi::kGeluAuxBias, Epi::kDGelu, Epi::kDGeluBGrad};
  for (DType ab : types) {
    for (DType c : types) {
      for (int t = 0; t < 4; ++t) {
        Case cs;
        cs.ab = ab;
        cs.c = c;
        cs.ta = t & 1;
        cs.tb = (t >> 1) & 1;
        cs.pad = cs.ta == cs.tb ? 8 : 0;
        for (Epi epi : epis) {
          cs.epi = epi;
          cs.aux = c;
          cs.beta = 0.0f;
          cs.alpha = 1.0f;
          RunCase(lt, cs);
          if (HasBias(epi) && c == DType::kBf16) {  // the bias as bf16, C's type
            Case bf16_bias = cs;
            bf16_bias.bias = DType::kBf16;
            RunCase(lt, bf16_bias);
          }
          if (HasAux(epi) && (epi == Epi::kGeluAuxBias || epi == Epi::kDGeluBGrad)) {
            Case other = cs;  // aux of the other type than C
            other.aux = c == DType::kF32 ? DType::kBf16 : DType::kF32;
            RunCase(lt, other);
          }
        }
        // Accumulation (the weight-gradient case: beta = 1) and a bias on top of it.
        cs.epi = Epi::kNone;
        cs.beta = 1.0f;
        cs.alpha = 0.5f;
        RunCase(lt, cs);
        cs.epi = Epi::kBias;
        RunCase(lt, cs);
        // Strided batch, overwrite and accumulate.
        Case bc = cs;
        bc.epi = Epi::kNone;
        bc.batch = 3;
        bc.m = 40;
        bc.n = 48;
        bc.k = 24;
        bc.beta = 0.0f;
        bc.alpha = 1.0f;
        RunCase(lt, bc);
        bc.beta = 1.0f;
        RunCase(lt, bc);
      }
    }
  }
  // Timed choice (AlgorithmChoice::kTimed): the fastest candidate gives the same products, and
  // an accumulating product's C is restored after the trials (else beta = 1 would add it 4 more
  // times and fail the reference).
  {
    absl::StatusOr<std::unique_ptr<LtMatmul>> timed =
        LtMatmul::Create(stream, AlgorithmChoice::kTimed);
    if (!timed.ok()) {
      fprintf(stderr, "lt_matmul_check: timed LtMatmul: %s\n", timed.status().ToString().c_str());
      return 2;
    }
    for (DType c : types) {
      for (Epi epi : {Epi::kNone, Epi::kGeluAuxBias, Epi::kDGelu, Epi::kDGeluBGrad}) {
        Case cs;
        cs.c = cs.aux = c;
        cs.bias = c;  // as the backend passes it
        cs.epi = epi;
        cs.m = 256, cs.n = 384, cs.k = 192;
        RunCase(**timed, cs);
      }
      Case acc;
      acc.c = c;
      acc.beta = 1.0f;
      acc.alpha = 0.5f;
      acc.m = 256, acc.n = 384, acc.k = 192;
      RunCase(**timed, acc);
    }
  }
  // Odd shapes (k, m odd: no 16-byte-aligned rows) with every epilogue.
  for (Epi epi : epis) {
    Case cs;
    cs.m = 33;
    cs.n = 100;
    cs.k = 50;
    cs.epi = epi;
    cs.ta = true;
    RunCase(lt, cs);
  }
  // Misaligned operands (2-byte / 4-byte aligned): a separate plan per alignment class.
  for (Epi epi : {Epi::kNone, Epi::kGeluAuxBias}) {
    Case cs;
    cs.epi = epi;
    cs.misalign_a = 1;
    RunCase(lt, cs);
    cs.misalign_a = 0;
    cs.misalign_c = 1;
    RunCase(lt, cs);
    cs.c = DType::kF32;
    cs.aux = DType::kF32;
    RunCase(lt, cs);
  }
  // The cache: the same key again (other buffers) must not build a new plan.
  {
    Case cs;
    cs.epi = Epi::kGeluAuxBias;
    RunCase(lt, cs);
    const size_t before = lt.CachedPlans();
    RunCase(lt, cs);
    const bool ok = lt.CachedPlans() == before;
    printf("%s  cache: %zu plans before and %zu after a repeated key\n", ok ? "PASS" : "FAIL",
           before, lt.CachedPlans());
    ok ? ++passed : ++failures;
  }
  // Validation: errors, not crashes, and Supports() false.
  {
    Buffer A(DType::kBf16, 64 * 64, 1.0f), Bm(DType::kBf16, 64 * 64, 1.0f),
        C(DType::kBf16, 64 * 64, 1.0f), bias(DType::kF32, 80, 1.0f),
        aux(DType::kBf16, 80 * 64, 1.f);
    LtProduct p;
    p.m = 64;
    p.n = 64;
    p.k = 64;
    p.a = A.ptr();
    p.lda = 64;
    p.b = Bm.ptr();
    p.ldb = 64;
    p.c = C.ptr();
    p.ldc = 64;
    LtEpilogue e;
    e.gelu = true;
    e.aux = aux.ptr();
    e.ld_aux = 60;
    ExpectError(lt, "ld_aux not a multiple of 8", p, e, absl::StatusCode::kInvalidArgument);
    e = {};
    e.bias_grad = static_cast<float*>(bias.ptr());
    ExpectError(lt, "bias_grad without dgelu", p, e, absl::StatusCode::kInvalidArgument);
    e = {};
    e.bias = static_cast<const float*>(bias.ptr()) + 1;
    ExpectError(lt, "bias 4-byte aligned", p, e, absl::StatusCode::kFailedPrecondition);
    e = {};
    e.bias = static_cast<const float*>(bias.ptr());
    LtProduct pb = p;
    pb.batch = 2;
    ExpectError(lt, "epilogue with batch 2", pb, e, absl::StatusCode::kInvalidArgument);
    e = {};
    e.gelu = true;
    LtProduct pg = p;
    pg.beta = 1.0f;
    ExpectError(lt, "gelu with beta 1", pg, e, absl::StatusCode::kInvalidArgument);
    LtProduct pl = p;
    pl.lda = 10;
    ExpectError(lt, "lda < k", pl, {}, absl::StatusCode::kInvalidArgument);
    LtProduct pt = p;
    pt.ab = DType::kF32;
    pt.c_type = DType::kBf16;  // f32 x f32 -> bf16
    const absl::Status st = lt.Run(pt, {});
    printf("info  f32 x f32 -> bf16 C: Supports=%d Run=%s\n", lt.Supports(pt, {}),
           st.ToString().c_str());
  }
  printf("\nsummary: %d passed, %d failed, %d unsupported, %zu plans cached\n", passed, failures,
         unsupported, lt.CachedPlans());
  for (const std::string& u : unsupported_list) printf("  unsupported: %s\n", u.c_str());

  if (failures == 0) {
    Timing(lt, stream, DType::kBf16, DType::kBf16, 4096, 4096, 4096, Epi::kNone);
    Timing(lt, stream, DType::kBf16, DType::kBf16, 4096, 4096, 4096, Epi::kGeluAuxBias);
    Timing(lt, stream, DType::kBf16, DType::kF32, 4096, 4096, 4096, Epi::kNone);
    Timing(lt, stream, DType::kF32, DType::kF32, 2048, 2048, 2048, Epi::kNone);  // ~50 if no TF32
  }
  created->reset();
  cudaStreamDestroy(stream);
  return failures == 0 ? 0 : 1;
}
