#include "site/backend/cuda/candidate_timing.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strait::site {

absl::StatusOr<CandidateTimes> TimeCandidates(cudaStream_t stream, int candidates,
                                              const std::function<bool(int)>& launch,
                                              void* preserved, size_t preserved_bytes, int runs) {
  void* saved = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&] {
    if (saved != nullptr) cudaFree(saved);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  };
  auto failed = [&](const char* what, cudaError_t err) {
    release();
    return absl::InternalError(absl::StrCat("timing candidates: ", what,
                                            " failed: ", cudaGetErrorName(err), " (",
                                            cudaGetErrorString(err), ")"));
  };
  cudaError_t err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&stop);
  if (err != cudaSuccess) return failed("cudaEventCreate", err);
  if (preserved_bytes > 0) {
    err = cudaMalloc(&saved, preserved_bytes);
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(saved, preserved, preserved_bytes, cudaMemcpyDeviceToDevice, stream);
    }
    if (err != cudaSuccess) return failed("saving the preserved output", err);
  }
  CandidateTimes result;
  float best_ms = -1;
  for (int i = 0; i < candidates; ++i) {
    float ms = -1;
    if (launch(i)) {
      cudaEventRecord(start, stream);
      bool queued = true;
      for (int r = 0; r < runs && queued; ++r) queued = launch(i);
      cudaEventRecord(stop, stream);
      if (!queued || cudaEventSynchronize(stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
        ms = -1;
      } else {
        ms /= runs;
      }
    }
    cudaGetLastError();  // a candidate that did not run is skipped, not an error
    absl::StrAppend(&result.times, i == 0 ? "" : " ",
                    ms < 0 ? "failed" : absl::StrFormat("%.3f", ms));
    if (ms >= 0 && (best_ms < 0 || ms < best_ms)) best_ms = ms, result.fastest = i;
  }
  if (preserved_bytes > 0) {
    err = cudaMemcpyAsync(preserved, saved, preserved_bytes, cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return failed("restoring the preserved output", err);
  }
  err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return failed("cudaStreamSynchronize", err);
  release();
  return result;
}

}  // namespace strait::site
