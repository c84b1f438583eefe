// /metrics: a FederationState in the Prometheus text exposition format, version 0.0.4, written by
// prometheus-cpp's core library (a fresh prometheus::Registry per call, its TextSerializer).
#pragma once

#include <string>
#include <string_view>

#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

// The Content-Type of RenderPrometheusText's output.
inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Renders every gateway-wide, per-site and per-link metric of `state` (names start with
// "strait_"), each family with its HELP and TYPE lines; a family without samples is left out.
// Counters hold the snapshot's absolute values. Values have 16 significant digits (NaN is "Nan").
// Pure function; thread-safe.
std::string RenderPrometheusText(const v1::FederationState& state);

}  // namespace strait::gateway
