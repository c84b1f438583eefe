// The CUDA, cuBLAS, cuDNN and NCCL check macros. No GPU needed: the error codes are given, not
// returned by a device call, and the runtime's error strings need no device.
#include "core/library_check.h"

#include <cublas_v2.h>
#include <cudnn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CudaCheckTest, SuccessIsOk) {
  EXPECT_TRUE(STRAIT_CUDA_CHECK(cudaSuccess).ok());
  EXPECT_TRUE(STRAIT_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS).ok());
  EXPECT_TRUE(STRAIT_CUDNN_CHECK(CUDNN_STATUS_SUCCESS).ok());
  EXPECT_TRUE(STRAIT_NCCL_CHECK(ncclSuccess).ok());
}

TEST(CudaCheckTest, CudaErrorNamesFileLineCallAndError) {
  const int line = __LINE__ + 1;
  absl::Status s = STRAIT_CUDA_CHECK(cudaErrorMemoryAllocation);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  const std::string message(s.message());
  EXPECT_THAT(message, StartsWith(absl::StrCat(__FILE__, ":", line, ": ")));
  EXPECT_THAT(message, HasSubstr(": cudaErrorMemoryAllocation: cudaErrorMemoryAllocation: "));
  EXPECT_THAT(message, HasSubstr(cudaGetErrorString(cudaErrorMemoryAllocation)));
}

TEST(CudaCheckTest, CublasErrorNamesTheStatus) {
  absl::Status s = STRAIT_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(": CUBLAS_STATUS_NOT_INITIALIZED: CUBLAS_STATUS_NOT_INITIALIZED: "));
}

TEST(CudaCheckTest, CudnnErrorNamesTheStatusAndItsNumber) {
  absl::Status s = STRAIT_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat(
                  ": CUDNN_STATUS_BAD_PARAM: ", cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), " (",
                  static_cast<int>(CUDNN_STATUS_BAD_PARAM), ")")));
}

TEST(CudaCheckTest, NcclErrorNamesTheResult) {
  absl::Status s = STRAIT_NCCL_CHECK(ncclInvalidArgument);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat(": ncclInvalidArgument: ncclResult ",
                                     static_cast<int>(ncclInvalidArgument), ": ",
                                     ncclGetErrorString(ncclInvalidArgument))));
}

TEST(CudaCheckTest, EvaluatesTheCallOnce) {
  int calls = 0;
  auto call = [&calls] {
    ++calls;
    return cudaErrorInvalidValue;
  };
  EXPECT_FALSE(STRAIT_CUDA_CHECK(call()).ok());
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_TRUE(STRAIT_CUDA_CHECK((++calls, cudaSuccess)).ok());
  EXPECT_EQ(calls, 1);
}

absl::Status ReturnsEarly(bool* reached_end) {
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaErrorInvalidValue));
  *reached_end = true;
  return absl::OkStatus();
}

TEST(CudaCheckTest, ComposesWithReturnIfError) {
  bool reached_end = false;
  EXPECT_FALSE(ReturnsEarly(&reached_end).ok());
  EXPECT_FALSE(reached_end);
}

}  // namespace
}  // namespace strait
