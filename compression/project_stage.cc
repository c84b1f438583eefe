// The proj stage: rows in, K coefficients a row out (fp32, for the next stage to code), and back.
#include "compression/project_stage.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec_stage.h"
#include "compression/vectorize.h"

namespace strait::compression {
namespace {

// out[t][0..m) = in[t][0..w) M for `rows` rows, M row-major [w][m]: for each row, acc[0..m) +=
// in[i] * M[i][0..m) over i ascending. Projecting is M = U (w = d, m = K); back, M = U^T.
STRAIT_VECTOR_CLONES void MultiplyRows(const float* __restrict in, uint64_t rows, uint64_t w,
                                       uint64_t m, const float* __restrict matrix,
                                       float* __restrict out) {
  for (uint64_t t = 0; t < rows; ++t) {
    const float* row = in + t * w;
    float* acc = out + t * m;
    for (uint64_t j = 0; j < m; ++j) acc[j] = 0.0f;
    for (uint64_t i = 0; i < w; ++i) {
      const float x = row[i];
      const float* mi = matrix + i * m;
      for (uint64_t j = 0; j < m; ++j) acc[j] += x * mi[j];
    }
  }
}

class ProjectStage final : public CodecStage {
 public:
  explicit ProjectStage(const StageSpec& spec) : k_(spec.subspace), seed_(spec.basis_seed) {}

  void SetRowWidth(uint64_t row_width) override { d_ = row_width; }

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                      ByteBuffer* out) override {
    const uint64_t n = context.element_count;
    STRAIT_RETURN_IF_ERROR(CheckRows(n));
    STRAIT_RETURN_IF_ERROR(LoadBasis());
    const uint64_t rows = n / d_;
    coefficients_.resize(rows * k_);  // aligned for the loop; `out` may not be
    ProjectRows(reinterpret_cast<const float*>(in.data()), rows, *basis_, coefficients_.data());
    const size_t base = out->size();
    out->Resize(base + 4 * coefficients_.size());
    if (!coefficients_.empty()) {
      std::memcpy(out->data() + base, coefficients_.data(), 4 * coefficients_.size());
    }
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    if (decoded_size % 4 != 0)
      return SizeError("proj", decoded_size - decoded_size % 4, decoded_size);
    const uint64_t n = decoded_size / 4;
    STRAIT_RETURN_IF_ERROR(CheckRows(n));
    const uint64_t expected = 4 * (n / d_) * k_;  // <= decoded_size, as K <= d
    if (expected != encoded_size) return SizeError("proj", expected, encoded_size);
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    STRAIT_RETURN_IF_ERROR(LoadBasis());
    coefficients_.resize(in.size() / 4);  // `in` may sit anywhere in a frame: copy to align
    if (!in.empty()) std::memcpy(coefficients_.data(), in.data(), in.size());
    UnprojectRows(coefficients_.data(), coefficients_.size() / k_, *basis_,
                  reinterpret_cast<float*>(out.data()));
    return absl::OkStatus();
  }

 private:
  // n values make whole rows of d_ >= K values, and the basis is within bounds.
  absl::Status CheckRows(uint64_t n) const {
    if (k_ > d_ || d_ > kMaxBasisElements / k_) {
      return SeededBasis(seed_, d_, k_).status();  // its message names K, d and the limit
    }
    if (n % d_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec stage 'proj': ", n, " values are not rows of ", d_));
    }
    return absl::OkStatus();
  }

  absl::Status LoadBasis() {
    if (basis_ != nullptr && basis_->rows == d_) return absl::OkStatus();
    STRAIT_ASSIGN_OR_RETURN(basis_, SeededBasis(seed_, d_, k_));
    return absl::OkStatus();
  }

  const uint64_t k_;
  const uint64_t seed_;
  uint64_t d_ = 0;
  std::shared_ptr<const Basis> basis_;  // for d_, once loaded
  std::vector<float> coefficients_;
};

}  // namespace

void ProjectRows(const float* x, uint64_t rows, const Basis& basis, float* c) {
  MultiplyRows(x, rows, basis.rows, basis.cols, basis.u.data(), c);
}

void UnprojectRows(const float* c, uint64_t rows, const Basis& basis, float* x) {
  MultiplyRows(c, rows, basis.cols, basis.rows, basis.u_t.data(), x);
}

std::unique_ptr<CodecStage> MakeProjectStage(const StageSpec& spec) {
  return std::make_unique<ProjectStage>(spec);
}

}  // namespace strait::compression
