// klt's transforms (compression/klt_math.h) on a CUDA device with cuBLAS, for the links of a site
// whose model runs there: the sender's moments and transform and the receiver's transform back,
// O(rows x width^2) a frame, leave the site's CPU cores, which then only round and code. The rows
// come from and return to host memory, where the link's codec chain holds them. Plain C++ header.
#pragma once

#include "compression/klt_math.h"

namespace strait::compression {

// Each KltMath it makes binds to CUDA device `device` on first use, with a stream and a cuBLAS
// handle of its own (a link's threads are not the compute thread), in fp32 (no TF32). Its calls
// block until their results are on the host; a missing device or a failed call is an error that
// names the CUDA or cuBLAS call.
KltMathFactory CudaKltMath(int device);

}  // namespace strait::compression
