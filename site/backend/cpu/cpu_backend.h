// The CPU backend: OpenBLAS sgemm for matrix products, vectorisable loops split over a fixed pool
// of threads for the rest. Results do not depend on the thread count except through OpenBLAS,
// whose thread count is set here (openblas_set_num_threads is process-wide: the last CPU backend
// created decides it).
#pragma once

#include <memory>

#include "site/backend/backend.h"

namespace strait {

// threads >= 1. The returned backend is not thread-safe (one user thread at a time).
std::unique_ptr<Backend> CreateCpuBackend(int threads);

}  // namespace strait
