// absl::Status <-> grpc::Status (the codes are the same numbers).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"

namespace strait::gateway {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace strait::gateway
