#include "core/yaml_reader.h"

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strait {
namespace {

// Splits "512MiB" into 512 and "MiB"; the unit may be separated by spaces.
bool SplitNumberUnit(absl::string_view text, double* number, std::string* unit) {
  text = absl::StripAsciiWhitespace(text);
  size_t i = 0;
  while (i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == '.' || text[i] == '-' ||
                             text[i] == '+' || text[i] == 'e' || text[i] == 'E')) {
    // An 'e' only belongs to the number when a digit or sign follows (so "5e" is not a number).
    if ((text[i] == 'e' || text[i] == 'E') &&
        (i + 1 >= text.size() || !(absl::ascii_isdigit(text[i + 1]) || text[i + 1] == '-'))) {
      break;
    }
    ++i;
  }
  if (i == 0 || !absl::SimpleAtod(text.substr(0, i), number)) return false;
  *unit = std::string(absl::StripAsciiWhitespace(text.substr(i)));
  return true;
}

}  // namespace

std::string DescribeYamlNode(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) {
    return node.size() == 0 ? "an empty list" : absl::StrCat("a list of ", node.size());
  }
  return "'" + node.Scalar() + "'";
}

absl::Status YamlError(absl::string_view file, const YAML::Node& node, absl::string_view path,
                       absl::string_view message) {
  int line = 1, column = 1;
  if (node.IsDefined() && node.Mark().line >= 0) {
    line = node.Mark().line + 1;
    column = node.Mark().column + 1;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      file, ":", line, ":", column, ": ", path.empty() ? "" : absl::StrCat(path, ": "), message));
}

YamlMap::YamlMap(absl::string_view file, YAML::Node node, std::string path)
    : file_(file), node_(std::move(node)), path_(std::move(path)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    status_ = YamlError(file_, node_, path_,
                        "expected a mapping (key: value lines), found " + DescribeYamlNode(node_));
  }
}

std::string YamlMap::PathOf(absl::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

bool YamlMap::Has(absl::string_view key) const {
  if (!node_.IsDefined() || !node_.IsMap()) return false;
  YAML::Node child = Child(key);
  return child.IsDefined() && !child.IsNull();
}

YAML::Node YamlMap::Get(absl::string_view key) {
  known_.insert(std::string(key));
  return Child(key);
}

YAML::Node YamlMap::Child(absl::string_view key) const {
  // Const access: yaml-cpp's non-const operator[] would insert the key.
  const YAML::Node& map = node_;
  if (!map.IsDefined() || !map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  return map[std::string(key)];
}

absl::Status YamlMap::ErrorAt(absl::string_view key, absl::string_view message) {
  YAML::Node child = Get(key);
  return YamlError(file_, child.IsDefined() && !child.IsNull() ? child : node_, PathOf(key),
                   message);
}

absl::Status YamlMap::Missing(absl::string_view key, absl::string_view expected) {
  return YamlError(file_, node_, PathOf(key),
                   absl::StrCat("missing; expected ", expected,
                                path_.empty() ? "" : absl::StrCat(" under '", path_, "'")));
}

absl::Status YamlMap::String(absl::string_view key, std::string* out, bool required) {
  YAML::Node child = Get(key);
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, "a string") : absl::OkStatus();
  }
  if (!child.IsScalar()) {
    return ErrorAt(key, "expected a string, found " + DescribeYamlNode(child));
  }
  *out = child.Scalar();
  return absl::OkStatus();
}

absl::Status YamlMap::Int(absl::string_view key, int64_t min, int64_t max, int64_t* out,
                          bool required) {
  YAML::Node child = Get(key);
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, absl::StrCat("an integer in [", min, ", ", max, "]"))
                    : absl::OkStatus();
  }
  int64_t value = 0;
  if (!child.IsScalar() || !absl::SimpleAtoi(child.Scalar(), &value)) {
    return ErrorAt(key, "expected an integer, found " + DescribeYamlNode(child));
  }
  if (value < min || value > max) {
    return ErrorAt(key,
                   absl::StrCat("expected an integer in [", min, ", ", max, "], found ", value));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status YamlMap::Int(absl::string_view key, int min, int max, int* out, bool required) {
  int64_t value = *out;
  if (absl::Status s = Int(key, int64_t{min}, int64_t{max}, &value, required); !s.ok()) return s;
  *out = static_cast<int>(value);
  return absl::OkStatus();
}

absl::Status YamlMap::Double(absl::string_view key, double min, double max, double* out,
                             bool required) {
  YAML::Node child = Get(key);
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, absl::StrCat("a number in [", min, ", ", max, "]"))
                    : absl::OkStatus();
  }
  double value = 0;
  if (!child.IsScalar() || !absl::SimpleAtod(child.Scalar(), &value) || !std::isfinite(value)) {
    return ErrorAt(key, "expected a number, found " + DescribeYamlNode(child));
  }
  if (value < min || value > max) {
    return ErrorAt(
        key, absl::StrCat("expected a number in [", min, ", ", max, "], found ", child.Scalar()));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status YamlMap::Float(absl::string_view key, double min, double max, float* out,
                            bool required) {
  double value = *out;
  if (absl::Status s = Double(key, min, max, &value, required); !s.ok()) return s;
  *out = static_cast<float>(value);
  return absl::OkStatus();
}

absl::Status YamlMap::Bool(absl::string_view key, bool* out, bool required) {
  YAML::Node child = Get(key);
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, "true or false") : absl::OkStatus();
  }
  bool value = false;
  if (!child.IsScalar() || !YAML::convert<bool>::decode(child, value)) {
    return ErrorAt(key, "expected true or false, found " + DescribeYamlNode(child));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status YamlMap::Bytes(absl::string_view key, uint64_t min, uint64_t* out, bool required) {
  YAML::Node child = Get(key);
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, "a size such as 512MiB") : absl::OkStatus();
  }
  double number = 0;
  std::string unit;
  if (!child.IsScalar() || !SplitNumberUnit(child.Scalar(), &number, &unit)) {
    return ErrorAt(
        key, "expected a size such as 1048576, 64KiB or 512MiB, found " + DescribeYamlNode(child));
  }
  static const std::pair<absl::string_view, double> kUnits[] = {{"", 1},
                                                                {"B", 1},
                                                                {"KB", 1e3},
                                                                {"MB", 1e6},
                                                                {"GB", 1e9},
                                                                {"KiB", 1024.0},
                                                                {"MiB", 1048576.0},
                                                                {"GiB", 1073741824.0},
                                                                {"TB", 1e12},
                                                                {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    double bytes = number * scale;
    if (bytes < static_cast<double>(min) || bytes > 1.8e19 || bytes != std::floor(bytes)) {
      return ErrorAt(key, absl::StrCat("expected a whole number of bytes >= ", min, ", found '",
                                       child.Scalar(), "'"));
    }
    *out = static_cast<uint64_t>(bytes);
    return absl::OkStatus();
  }
  return ErrorAt(
      key, "unknown size unit '" + unit + "'; expected B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
}

absl::Status YamlMap::Seconds(absl::string_view key, double min, double* out, bool required) {
  YAML::Node child = Get(key);
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, "a duration such as 10s") : absl::OkStatus();
  }
  double number = 0;
  std::string unit;
  if (!child.IsScalar() || !SplitNumberUnit(child.Scalar(), &number, &unit)) {
    return ErrorAt(
        key, "expected a duration such as 500ms, 10s or 2m, found " + DescribeYamlNode(child));
  }
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "ms") scale = 1e-3;
  if (unit == "m" || unit == "min") scale = 60;
  if (scale == 0) return ErrorAt(key, "unknown duration unit '" + unit + "'; expected ms, s or m");
  if (number * scale < min) {
    return ErrorAt(key, absl::StrCat("expected a duration of at least ", min, "s, found '",
                                     child.Scalar(), "'"));
  }
  *out = number * scale;
  return absl::OkStatus();
}

absl::Status YamlMap::IntList(absl::string_view key, int min, int max, size_t length,
                              std::vector<int>* out, bool required) {
  YAML::Node child = Get(key);
  std::string expected =
      length > 0 ? absl::StrCat("a list of ", length, " integers") : "a list of integers";
  if (!child.IsDefined() || child.IsNull()) {
    return required ? Missing(key, expected) : absl::OkStatus();
  }
  if (!child.IsSequence() || (length > 0 && child.size() != length) ||
      (length == 0 && child.size() == 0)) {
    return ErrorAt(
        key, absl::StrCat("expected ", expected, " such as [", length == 2 ? "0, 2" : "1024, 1024",
                          "], found ", DescribeYamlNode(child)));
  }
  std::vector<int> values;
  for (size_t i = 0; i < child.size(); ++i) {
    const YAML::Node& item = child[i];
    int64_t value = 0;
    std::string item_path = absl::StrCat(PathOf(key), "[", i, "]");
    if (!item.IsScalar() || !absl::SimpleAtoi(item.Scalar(), &value)) {
      return YamlError(file_, item, item_path,
                       "expected an integer, found " + DescribeYamlNode(item));
    }
    if (value < min || value > max) {
      return YamlError(
          file_, item, item_path,
          absl::StrCat("expected an integer in [", min, ", ", max, "], found ", value));
    }
    values.push_back(static_cast<int>(value));
  }
  *out = std::move(values);
  return absl::OkStatus();
}

absl::Status YamlMap::Finish() {
  if (!node_.IsDefined() || !node_.IsMap()) return absl::OkStatus();
  for (const auto& entry : node_) {
    std::string key = entry.first.Scalar();
    if (known_.count(key)) continue;
    std::vector<std::string> allowed(known_.begin(), known_.end());
    return YamlError(file_, entry.first, PathOf(key),
                     absl::StrCat("unknown key; expected one of ", absl::StrJoin(allowed, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace strait
