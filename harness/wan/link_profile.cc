#include "harness/wan/link_profile.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace strait::harness {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

struct Named {
  const char* name;
  double rate;
  microseconds delay;
};

// DESIGN.md §10 gives these as round trips (metro 2 ms, region 30 ms, continent 150 ms).
constexpr Named kProfiles[] = {
    {"metro", 10e9, milliseconds(1)},
    {"region", 1e9, milliseconds(15)},
    {"continent", 100e6, milliseconds(75)},
    {"satellite", 20e6, milliseconds(300)},
};

// Splits "2.5gbit" into a non-negative number and its (lower-case) unit.
bool SplitNumber(const std::string& text, double* number, std::string* unit) {
  const size_t end = text.find_first_not_of("0123456789.");
  const std::string digits = text.substr(0, end);
  if (digits.empty() || !absl::SimpleAtod(digits, number) || !std::isfinite(*number)) return false;
  *unit = absl::AsciiStrToLower(end == std::string::npos ? "" : text.substr(end));
  return true;
}

// "75 ms", "1.5 ms", "2 s", "300 us".
std::string FormatDuration(microseconds d) {
  if (d.count() >= 1'000'000 && d.count() % 100'000 == 0)
    return absl::StrFormat("%g s", d.count() / 1e6);
  if (d.count() >= 1000) return absl::StrFormat("%g ms", d.count() / 1e3);
  return absl::StrFormat("%d us", d.count());
}

std::string FormatRate(double bits_per_second) {
  if (bits_per_second <= 0) return "unlimited rate";
  constexpr std::pair<double, const char*> kUnits[] = {
      {1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}};
  for (const auto& [scale, unit] : kUnits) {
    if (bits_per_second >= scale) return absl::StrFormat("%g %s", bits_per_second / scale, unit);
  }
  return absl::StrFormat("%g bit/s", bits_per_second);
}

}  // namespace

std::vector<std::string> ProfileNames() {
  std::vector<std::string> names;
  for (const Named& p : kProfiles) names.emplace_back(p.name);
  return names;
}

absl::StatusOr<LinkProfile> NamedProfile(std::string_view name) {
  for (const Named& p : kProfiles) {
    if (name == p.name) {
      LinkProfile profile;
      profile.name = p.name;
      profile.rate_bits_per_second = p.rate;
      profile.one_way_delay = p.delay;
      return profile;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown link profile '", std::string(name),
                                                 "'; the profiles are ",
                                                 absl::StrJoin(ProfileNames(), ", ")));
}

absl::StatusOr<double> ParseRate(std::string_view text) {
  const std::string trimmed(absl::StripAsciiWhitespace(std::string(text)));
  if (absl::AsciiStrToLower(trimmed) == "unlimited") return 0.0;
  double number = 0;
  std::string unit;
  if (SplitNumber(trimmed, &number, &unit)) {
    // "mbit", "mbit/s" and "mbps" mean the same.
    absl::string_view suffixless = unit;
    if (absl::ConsumeSuffix(&suffixless, "/s")) {
      unit = std::string(suffixless);
    } else if (absl::ConsumeSuffix(&suffixless, "bps")) {
      unit = absl::StrCat(suffixless, "bit");
    }
    constexpr std::pair<const char*, double> kUnits[] = {
        {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12}};
    for (const auto& [name, scale] : kUnits) {
      if (unit == name && number > 0) return number * scale;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "rate '", std::string(text),
      "' is not a positive number of bits per second with a unit, e.g. 500kbit, 100mbit, "
      "2.5gbit, 10Gbit/s (or 'unlimited')"));
}

absl::StatusOr<microseconds> ParseDuration(std::string_view text) {
  const std::string trimmed(absl::StripAsciiWhitespace(std::string(text)));
  double number = 0;
  std::string unit;
  if (SplitNumber(trimmed, &number, &unit)) {
    constexpr std::pair<const char*, double> kUnits[] = {{"us", 1}, {"ms", 1e3}, {"s", 1e6}};
    for (const auto& [name, scale] : kUnits) {
      if (unit == name) return microseconds(std::llround(number * scale));
    }
    if (unit.empty() && number == 0) return microseconds(0);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("duration '", std::string(text),
                   "' is not a non-negative number with a unit us, ms or s, e.g. 300us, "
                   "15ms, 1.5s"));
}

absl::StatusOr<LossBurst> ParseLossBurst(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    absl::StatusOr<microseconds> interval = ParseDuration(text.substr(0, colon));
    absl::StatusOr<microseconds> duration = ParseDuration(text.substr(colon + 1));
    if (interval.ok() && duration.ok() && *interval >= milliseconds(1) &&
        *duration >= milliseconds(1)) {
      return LossBurst{std::chrono::duration_cast<milliseconds>(*interval),
                       std::chrono::duration_cast<milliseconds>(*duration)};
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "loss burst '", std::string(text),
      "' is not MEAN_INTERVAL:DURATION with both at least 1 ms, e.g. 10s:200ms (a 200 ms stall "
      "every 10 s on average)"));
}

std::string Describe(const LinkProfile& profile) {
  std::string line = absl::StrCat(profile.name.empty() ? "custom" : profile.name, ": ",
                                  FormatRate(profile.rate_bits_per_second), ", ",
                                  FormatDuration(profile.one_way_delay), " one-way");
  if (profile.jitter.count() > 0)
    absl::StrAppend(&line, ", jitter ", FormatDuration(profile.jitter));
  if (profile.loss_burst.mean_interval.count() > 0 && profile.loss_burst.duration.count() > 0) {
    absl::StrAppend(&line, ", loss bursts of ", FormatDuration(profile.loss_burst.duration),
                    " every ", FormatDuration(profile.loss_burst.mean_interval), " on average");
  }
  return line;
}

}  // namespace strait::harness
