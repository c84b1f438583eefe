#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"

namespace strait {

absl::Status SetupLogging(const std::string& component, const std::string& level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError("unknown log level '" + level +
                                      "'; expected trace, debug, info, warn, error or off");
  }
  spdlog::drop("strait");  // Allows a second call (tests).
  auto logger = spdlog::stderr_color_mt("strait");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [" + component + "] %v");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds < 0 ? 0 : seconds + 0.5);
  return s >= 3600 ? absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60)
                   : absl::StrFormat("%dm%02ds", s / 60, s % 60);
}

}  // namespace strait
