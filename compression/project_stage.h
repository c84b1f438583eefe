// proj:K[:SEED]: the rows of a tensor (width d, its last dimension) go through a seeded subspace,
// C = X U with U = SeededBasis(seed, d, K), and come back as X U U^T
// (docs/notes/activation-subspace.md). Both loops run in a fixed order on fp32 (for each row,
// acc[0..K) += x[i] * U[i][0..K) over i ascending; back, x[0..d) += c[j] * U^T[j][0..d) over j
// ascending), vectorised across the independent outputs only, and the .cc is compiled with
// -ffp-contract=off: the same bits on every compiler and architecture, and what a device kernel
// must reproduce.
#pragma once

#include <cstdint>

#include "compression/seeded_basis.h"

namespace strait::compression {

// c[t][0..K) = x[t][0..d) U for `rows` rows (x: [rows][d], c: [rows][K]; no overlap).
void ProjectRows(const float* x, uint64_t rows, const Basis& basis, float* c);

// x[t][0..d) = c[t][0..K) U^T for `rows` rows (c: [rows][K], x: [rows][d]; no overlap).
void UnprojectRows(const float* c, uint64_t rows, const Basis& basis, float* x);

}  // namespace strait::compression
