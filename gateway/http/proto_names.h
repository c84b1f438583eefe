// Short lower-case names of the proto enums, as /metrics labels and /api/state history keys use
// them.
#pragma once

#include <string_view>

#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

inline std::string_view DirectionName(v1::Direction direction) {
  switch (direction) {
    case v1::FORWARD:
      return "forward";
    case v1::BACKWARD:
      return "backward";
    default:
      return "unspecified";
  }
}

inline std::string_view SiteStateName(v1::SiteState state) {
  switch (state) {
    case v1::SITE_ABSENT:
      return "absent";
    case v1::SITE_JOINED:
      return "joined";
    case v1::SITE_TRAINING:
      return "training";
    case v1::SITE_DOWN:
      return "down";
    case v1::SITE_DONE:
      return "done";
    default:
      return "unspecified";
  }
}

inline std::string_view SeverityName(v1::Alert::Severity severity) {
  switch (severity) {
    case v1::Alert::INFO:
      return "info";
    case v1::Alert::WARNING:
      return "warning";
    case v1::Alert::CRITICAL:
      return "critical";
    default:
      return "unspecified";
  }
}

}  // namespace strait::gateway
