// The CPU backend: OpenBLAS sgemm for matrix products (split over a fixed pool of threads, each
// part a single-threaded sgemm), vectorisable loops split over the same pool for the rest.
// Element-wise and row-wise ops give the same bits for any thread count; matrix products are
// deterministic for a given thread count. Sets OpenBLAS to one thread (process-wide).
#pragma once

#include <memory>

#include "site/backend/backend.h"

namespace strait::site {

// threads >= 1. The returned backend is not thread-safe (one user thread at a time).
std::unique_ptr<Backend> CreateCpuBackend(int threads);

}  // namespace strait::site
