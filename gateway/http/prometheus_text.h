// /metrics: a FederationState in the Prometheus text exposition format, version 0.0.4.
#pragma once

#include <string>
#include <string_view>

#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

// The Content-Type of RenderPrometheusText's output.
inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Renders every gateway-wide, per-site and per-link metric of `state` (names start with
// "strait_"), each family with its HELP and TYPE lines. Pure function; thread-safe.
std::string RenderPrometheusText(const v1::FederationState& state);

// Escapes a label value for the text format: backslash, double quote and line feed.
std::string EscapeLabelValue(std::string_view value);

// Formats a sample value: shortest round-trip decimal, "NaN", "+Inf" or "-Inf".
std::string FormatSampleValue(double value);

}  // namespace strait::gateway
