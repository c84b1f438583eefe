// The job spec parser (ParseJobSpec, core/job_spec.h) as a class: one method per section of the
// YAML, each reading its keys with YamlMap (which rejects unknown keys), then the checks that span
// sections. Internal to core: job_spec_parser.cc (the top level, gateway, dashboard, tls, model,
// data), job_spec_parser_training.cc (training, optimizer, checkpoints, replicas and their sync)
// and job_spec_parser_sites.cc (sites, layers, links, schedule, memory budget). One parse per
// object. job_spec_parser_teacher.cc: the teacher and training.distill.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/job_spec.h"
#include "core/yaml_reader.h"

namespace strait::job_spec_internal {

inline constexpr int kMaxWidth = 1 << 20;  // Largest layer width / class count accepted.
inline constexpr int kMaxSites = 64;
inline constexpr int kMaxWorkers = 1024;
inline constexpr int kMaxMachines = 4096;
inline constexpr int kMaxDepth = 1024;

// 1-63 lower-case letters, digits, '.', '_' or '-': a site id names its certificate and files.
bool IsSiteId(const std::string& id);

class JobSpecParser {
 public:
  JobSpecParser(absl::string_view file, absl::string_view base_dir)
      : file_(file), base_dir_(std::filesystem::absolute(std::string(base_dir))) {}

  absl::StatusOr<JobSpec> Parse(absl::string_view text);

 private:
  // Relative paths are relative to the job spec's directory, so every process agrees on them.
  std::string Resolve(const std::string& path) const;

  // The mapping under `key` (absent is fine: every section has defaults). Check status() after.
  YamlMap Section(YamlMap& parent, absl::string_view key);
  // YamlMap::Finish, after checking that every key read has its place in the field table
  // (core/job_fields.h): a key missing there is a bug, reported as INTERNAL.
  absl::Status Finish(YamlMap& map);

  static absl::Status CheckHostPort(YamlMap& map, absl::string_view key, const std::string& value);

  absl::Status ParseName(YamlMap& map);

  absl::Status ParseGateway(YamlMap& root);

  absl::Status ParseDashboard(YamlMap& root);

  absl::Status ParseTls(YamlMap& root);

  // `model:` under `root` (the job's, or the teacher's) into `m`.
  absl::Status ParseModel(YamlMap& root, ModelSpec& m);

  absl::Status ParseGpt(YamlMap& map, ModelFamily family, GptSpec& g);  // gpt and llama

  absl::Status ParseData(YamlMap& root);

  absl::Status ParseOptimizer(YamlMap& training);

  absl::Status ParseCheckpoint(YamlMap& training);

  absl::Status ParseTraining(YamlMap& root);

  // training.sync, training.outer and training.fixed_point_bits; ParseReplicas checks that the job
  // has replicas for them.
  absl::Status ParseSync(YamlMap& map);

  // `replicas:` R pipelines of site ids, the first the ids of `sites` in stage order.
  absl::Status ParseReplicas(YamlMap& root);

  // An outer round replaces the parameters: every stage must hold one version of them between
  // steps (no 2bw), and a checkpoint must fall on a round's end (its start is then the
  // checkpoint's parameters; the outer momentum is saved with it).
  absl::Status CheckOuterRounds(YamlMap& root);

  // Every site evaluates between the same steps, with the weights all stages hold then: 1f1b and
  // gpipe flush the pipeline at every step's end, 2bw never does.
  absl::Status ParseEvalEvery(YamlMap& map);

  absl::Status ParseUpdateTiming(YamlMap& map);

  // training.distill: needs a teacher (ParseTeacher checks).
  absl::Status ParseDistill(YamlMap& training);

  // `teacher:` (job_spec_parser_teacher.cc): its model, checkpoint, sites and what it sends; a
  // teacher must read the student's batches and predict the student's classes.
  absl::Status ParseTeacher(YamlMap& root);
  absl::Status ParseTeacherSites(YamlMap& teacher);

  // `serving:` (job_spec_parser_serving.cc): the clients that may ask a serving federation.
  absl::Status ParseServing(YamlMap& root);

  static int LargestDivisorAtMost(int n, int limit);

  absl::Status ParseSites(YamlMap& root);

  // How a site's machines and workers divide a microbatch and its layers (the model's sizes are
  // checked once the layer ranges are known good).
  absl::Status CheckSiteLayout(YamlMap& map, const SiteSpec& site);

  // The sites' ranges, in order, must tile [0, num_layers) exactly. Sites with layers: auto take
  // what the pinned ranges leave, at least one layer each.
  absl::Status CheckLayerSplit(const std::vector<YAML::Node>& nodes, int num_layers);

  absl::Status ParseLinks(YamlMap& root);

  // 2bw keeps a stage's in-flight microbatches apart by their index within a step: stage s holds at
  // most S - s of them, consecutive across a step boundary, so they are distinct only when M >= S.
  absl::Status CheckSchedule(YamlMap& root);

  // The gateway's budget must hold at least one frame, or a producer could never push.
  absl::Status CheckMemoryBudget(YamlMap& root);

  std::string SiteList() const;

  std::string file_;
  std::filesystem::path base_dir_;
  JobSpec spec_;
  YAML::Node extra_in_flight_node_;  // training.extra_in_flight when it says auto.
  // training.sync, outer and fixed_point_bits where given (they need replicas).
  std::vector<std::pair<std::string, YAML::Node>> sync_nodes_;
  std::optional<YAML::Node> distill_node_;  // training.distill where given (needs a teacher).
};

}  // namespace strait::job_spec_internal
