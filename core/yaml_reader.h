// Typed reading of YAML mappings with precise errors, for the job spec parser.
//
// Every error reads "file:line:column: path: what was expected, what was found", with line and
// column 1-based and pointing at the offending value (or at the mapping when a key is missing).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strait {

// "file:line:col: path: message" as an InvalidArgument status. A node without a position (missing
// or synthesised) is reported at line 1, column 1.
absl::Status YamlError(absl::string_view file, const YAML::Node& node, absl::string_view path,
                       absl::string_view message);

// How a node shows up in "found ..." text: the scalar in quotes, or "a mapping", "a list",
// "nothing".
std::string DescribeYamlNode(const YAML::Node& node);

// Reads the keys of one YAML mapping. Remembers which keys were read so that Finish() can reject
// unknown keys (typos must not be silently ignored). Not thread-safe; cheap to construct.
class YamlMap {
 public:
  // Fails (via status()) when `node` is present but not a mapping.
  YamlMap(absl::string_view file, YAML::Node node, std::string path);
  YamlMap(const YamlMap&) = default;
  // YAML::Node's assignment rebinds the node it refers to inside the document; never assign.
  YamlMap& operator=(const YamlMap&) = delete;

  // Not OK when the node given to the constructor was not a mapping.
  const absl::Status& status() const { return status_; }
  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }
  absl::string_view file() const { return file_; }

  // Path of a child key, e.g. "training.optimizer" + "lr" -> "training.optimizer.lr".
  std::string PathOf(absl::string_view key) const;
  bool Has(absl::string_view key) const;
  // The child node (undefined when absent); marks the key as known.
  YAML::Node Get(absl::string_view key);
  // An error at the child's position (or the mapping's when the child is absent).
  absl::Status ErrorAt(absl::string_view key, absl::string_view message);
  absl::Status Missing(absl::string_view key, absl::string_view expected);

  // Each reader leaves *out untouched when the key is absent and `required` is false.
  absl::Status String(absl::string_view key, std::string* out, bool required = false);
  absl::Status Int(absl::string_view key, int64_t min, int64_t max, int64_t* out,
                   bool required = false);
  absl::Status Int(absl::string_view key, int min, int max, int* out, bool required = false);
  absl::Status Double(absl::string_view key, double min, double max, double* out,
                      bool required = false);
  absl::Status Float(absl::string_view key, double min, double max, float* out,
                     bool required = false);
  absl::Status Bool(absl::string_view key, bool* out, bool required = false);
  // A byte count: an integer, or a number with a unit B, KB, MB, GB, KiB, MiB, GiB ("512MiB").
  absl::Status Bytes(absl::string_view key, uint64_t min, uint64_t* out, bool required = false);
  // A duration in seconds: a number (seconds), or with a unit ms, s, m ("500ms", "10s").
  absl::Status Seconds(absl::string_view key, double min, double* out, bool required = false);
  // A list of integers, each in [min, max]; `length` > 0 requires exactly that many elements.
  absl::Status IntList(absl::string_view key, int min, int max, size_t length,
                       std::vector<int>* out, bool required = false);

  // One of a fixed set of names.
  template <typename E>
  absl::Status Enum(absl::string_view key,
                    std::initializer_list<std::pair<absl::string_view, E>> names, E* out,
                    bool required = false) {
    std::string text;
    if (absl::Status s = String(key, &text, required); !s.ok() || !Has(key)) return s;
    std::string expected;
    for (const auto& [name, value] : names) {
      if (name == text) {
        *out = value;
        return absl::OkStatus();
      }
      expected += (expected.empty() ? "" : ", ") + std::string(name);
    }
    return ErrorAt(key, "expected one of " + expected + ", found '" + text + "'");
  }

  // Rejects keys that no reader asked for, naming the allowed ones.
  absl::Status Finish();
  // Allows `key` without reading it (e.g. keys of another model family are reported separately).
  void Allow(absl::string_view key) { known_.insert(std::string(key)); }
  // The keys read or allowed so far.
  const std::set<std::string>& known() const { return known_; }

 private:
  YAML::Node Child(absl::string_view key) const;

  std::string file_;
  YAML::Node node_;
  std::string path_;
  absl::Status status_;
  std::set<std::string> known_;
};

}  // namespace strait
