#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

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

}  // namespace strait
