// SeededBasis: normals, Gram-Schmidt and the cache. Every operation here is an IEEE-rounded +, -,
// *, / or sqrt in double, in a fixed order, and the file is compiled with -ffp-contract=off: no
// libm call (whose last bit differs between C libraries), no reassociation, no FMA.
#include "compression/seeded_basis.h"

#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "compression/float_bits.h"

namespace strait::compression {
namespace {

// Natural log of x in (0, 1]: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| < 0.172, summed to s^27 (the next term is below 1e-19).
double Log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact
  if (m < 0.70710678118654752) {
    m *= 2;  // exact
    --e;
  }
  const double s = (m - 1) / (m + 1);
  const double s2 = s * s;
  double sum = 1.0 / 27;
  for (int k = 12; k >= 0; --k) sum = sum * s2 + 1.0 / (2 * k + 1);
  return e * 0.69314718055994531 + 2 * s * sum;
}

// sin and cos of 2 pi t for t in [0, 1): the quarter turn is picked exactly (4t - q is exact), the
// angle within it, a in [0, pi/2), by Taylor series to a^25 (the next term is below 1e-18).
void SinCosTurns(double t, double* sin_out, double* cos_out) {
  const double four_t = 4 * t;
  const int quarter = static_cast<int>(four_t);
  const double a = (four_t - quarter) * 1.5707963267948966;
  const double a2 = a * a;
  double s = 1.0, c = 1.0;  // Horner from the highest term: s = sum (-a2)^n / (2n+1)!, c likewise
  for (int n = 12; n >= 1; --n) {
    s = 1.0 - s * a2 / ((2 * n) * (2 * n + 1));
    c = 1.0 - c * a2 / ((2 * n - 1) * (2 * n));
  }
  s *= a;
  switch (quarter) {
    case 0:
      *sin_out = s, *cos_out = c;
      break;
    case 1:
      *sin_out = c, *cos_out = -s;
      break;
    case 2:
      *sin_out = -s, *cos_out = -c;
      break;
    default:
      *sin_out = -c, *cos_out = s;
      break;
  }
}

// One pass of modified Gram-Schmidt over the k columns of v ([k][d], a column per row of v):
// each column loses its components along the columns before it, one at a time, then is
// normalised.
void GramSchmidtPass(uint64_t d, uint64_t k, std::vector<double>& v) {
  for (uint64_t j = 0; j < k; ++j) {
    double* vj = v.data() + j * d;
    for (uint64_t i = 0; i < j; ++i) {
      const double* vi = v.data() + i * d;
      double dot = 0;
      for (uint64_t r = 0; r < d; ++r) dot += vi[r] * vj[r];
      for (uint64_t r = 0; r < d; ++r) vj[r] -= dot * vi[r];
    }
    double norm2 = 0;
    for (uint64_t r = 0; r < d; ++r) norm2 += vj[r] * vj[r];
    const double inverse = 1.0 / std::sqrt(norm2);  // sqrt rounds exactly (IEEE 754)
    for (uint64_t r = 0; r < d; ++r) vj[r] *= inverse;
  }
}

std::shared_ptr<const Basis> BuildBasis(uint64_t seed, uint64_t d, uint64_t k) {
  std::vector<double> v = SeededNormals(seed, d * k);  // [k][d]: column j of U is row j of v
  GramSchmidtPass(d, k, v);
  GramSchmidtPass(d, k, v);  // twice: orthogonal to working precision
  auto basis = std::make_shared<Basis>();
  basis->seed = seed, basis->rows = d, basis->cols = k;
  basis->u.resize(d * k);
  basis->u_t.resize(d * k);
  for (uint64_t j = 0; j < k; ++j) {
    for (uint64_t r = 0; r < d; ++r) {
      const float x = static_cast<float>(v[j * d + r]);
      basis->u[r * k + j] = x;
      basis->u_t[j * d + r] = x;
    }
  }
  return basis;
}

// The most recent bases. A frame names (seed, d, K), so the cache is bounded: a stream of frames
// with ever new seeds costs time, not memory.
class BasisCache {
 public:
  std::shared_ptr<const Basis> Find(uint64_t seed, uint64_t d, uint64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& b : entries_) {
      if (b->seed == seed && b->rows == d && b->cols == k) return b;
    }
    return nullptr;
  }
  // Keeps `basis` unless another thread stored the same one meanwhile; returns the kept one.
  std::shared_ptr<const Basis> Add(std::shared_ptr<const Basis> basis) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& b : entries_) {
      if (b->seed == basis->seed && b->rows == basis->rows && b->cols == basis->cols) return b;
    }
    if (entries_.size() == kCapacity) entries_.erase(entries_.begin());
    entries_.push_back(basis);
    return basis;
  }

 private:
  static constexpr size_t kCapacity = 8;
  std::mutex mu_;
  std::vector<std::shared_ptr<const Basis>> entries_;  // oldest first
};

}  // namespace

std::vector<double> SeededNormals(uint64_t seed, uint64_t count) {
  std::vector<double> out(count);
  uint64_t state = seed;
  for (uint64_t i = 0; i < count; i += 2) {
    const double u1 = static_cast<double>((SplitMix64(state) >> 11) + 1) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(SplitMix64(state) >> 11) * 0x1p-53;        // [0, 1)
    const double r = std::sqrt(-2 * Log(u1));
    double s, c;
    SinCosTurns(u2, &s, &c);
    out[i] = r * c;
    if (i + 1 < count) out[i + 1] = r * s;
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Basis>> SeededBasis(uint64_t seed, uint64_t d, uint64_t k) {
  if (k < 1 || k > d) {
    return absl::InvalidArgumentError(absl::StrCat("proj:", k, " needs rows of at least ", k,
                                                   " values; the tensor's rows have ", d));
  }
  if (d > kMaxBasisElements / k) {
    return absl::InvalidArgumentError(
        absl::StrCat("proj:", k, " on rows of ", d, " values needs a basis of ", d * k,
                     " values, above the limit of ", kMaxBasisElements));
  }
  static BasisCache* const cache = new BasisCache;
  if (std::shared_ptr<const Basis> found = cache->Find(seed, d, k)) return found;
  return cache->Add(BuildBasis(seed, d, k));  // built outside the lock
}

}  // namespace strait::compression
