// `strait config check FILE...`: validates job specs and prints how each splits the model.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/job_spec.h"
#include "core/model_layout.h"
#include "core/tied_embeddings.h"
#include "site/data/tokenizer.h"
#include "site/exchange/teacher_targets_codec.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

// 1234567 -> "1,234,567"
std::string Thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
}

// The other replicas' sites of stage `stage`, "dc-c, dc-e".
std::string ReplicasOf(const JobSpec& spec, size_t stage) {
  const std::vector<std::string> ids = spec.StageReplicaIds(static_cast<int>(stage));
  return absl::StrJoin(ids.begin() + 1, ids.end(), ", ");
}

// The pipelines, the data each trains, and what their stages' replicas exchange.
void PrintReplicas(const JobSpec& spec, const std::vector<LayerLayout>& layers) {
  const TrainingSpec& t = spec.training;
  std::printf(
      "replicas: %d pipelines, each on its own shard of the data (%d samples a step each, "
      "%d in all):\n",
      spec.Replicas(), t.global_batch, t.global_batch * spec.Replicas());
  for (int r = 0; r < spec.Replicas(); ++r) {
    std::printf("  replica %d: %s\n", r, absl::StrJoin(spec.replicas[r], " -> ").c_str());
  }
  int64_t largest = 0;  // Parameters of the largest stage: its replicas' sums are the largest.
  for (const SiteSpec& site : spec.sites) {
    int64_t params = 0;
    for (int i = site.layers.start; i < site.layers.end; ++i) params += layers[i].param_count;
    largest = std::max(largest, params);
  }
  if (t.sync == ReplicaSync::kEveryStep) {
    std::printf(
        "  sync every_step: each stage's replicas sum their gradients before every update "
        "through the gateway's secure sum (32-bit fixed point, steps of 2^-%d; up to %s "
        "each way per replica and step); one pipeline with %dx the batch trains the same\n",
        t.fixed_point_bits, HumanBytes(4.0 * largest).c_str(), spec.Replicas());
  } else {
    std::printf(
        "  sync outer (DiLoCo): replicas train apart and every %d steps average their "
        "pseudo-gradients through the gateway's secure sum (%d-bit values after the first "
        "round; up to %s each way per replica and round), then take a Nesterov step (lr "
        "%g, momentum %g)\n",
        t.outer.every, t.outer.bits, HumanBytes(t.outer.bits / 8.0 * largest).c_str(), t.outer.lr,
        t.outer.momentum);
  }
}

// The teacher of knowledge sharing: its sites and layers, and what it sends the student.
void PrintTeacher(const JobSpec& spec) {
  const TeacherSpec& t = spec.teacher;
  const std::vector<LayerLayout> layers = BuildModelLayout(t.model);
  int64_t total = 0;
  for (const LayerLayout& l : layers) total += l.param_count;
  std::printf(
      "\nteacher: %s model, %zu layers, %s parameters from %s (forward only; its weights "
      "stay on its sites)\n",
      ToString(t.model.family), layers.size(), Thousands(total).c_str(), t.checkpoint.c_str());
  for (const SiteSpec& site : t.sites) {
    std::printf("  site %-10s layers [%d, %d)  %s x%d\n", site.id.c_str(), site.layers.start,
                site.layers.end, ToString(site.device), site.workers);
  }
  const int classes = spec.model.Classes();
  const int64_t targets = int64_t{spec.training.MicrobatchSize()} * spec.model.TargetsPerSample();
  const uint64_t frame = site::TeacherTargetsBytes(targets, t.top_k, t.values, classes);
  const uint64_t header = site::TeacherTargetsBytes(0, t.top_k, t.values, classes);
  const int per_target = static_cast<int>((frame - header) / targets);
  std::printf(
      "  -> %s (the student's last stage): top %d of %d per target as %s, %d bytes per target "
      "(%s per microbatch) against %d as fp32 logits; loss alpha %g, temperature %g\n",
      spec.sites.back().id.c_str(), t.top_k, classes, ToString(t.values), per_target,
      HumanBytes(static_cast<double>(frame)).c_str(), 4 * classes, spec.training.distill.alpha,
      spec.training.distill.temperature);
}

void PrintSplit(const JobSpec& spec) {
  const std::vector<LayerLayout> layers = BuildModelLayout(spec.model);
  int64_t total = 0;
  for (const LayerLayout& l : layers) total += l.param_count;
  const TrainingSpec& t = spec.training;
  std::printf("federation %s: %s model, %zu layers, %s parameters (%s as fp32)\n",
              spec.name.c_str(), std::string(ToString(spec.model.family)).c_str(), layers.size(),
              Thousands(total).c_str(), HumanBytes(4.0 * total).c_str());
  if (const std::optional<TiedMatrix> tied = TiedMatrixOf(spec.model)) {
    std::printf(
        "tied embeddings: lm_head's weight is the token embedding (%s parameters counted twice "
        "above)%s\n",
        Thousands(tied->numel).c_str(),
        TiedAcrossSites(spec)
            ? absl::StrCat("; ", spec.sites.front().id, " and ", spec.sites.back().id,
                           " exchange its gradient every step, ", HumanBytes(4.0 * tied->numel),
                           " each way, lossless", TiedLink(spec).encryption ? " and encrypted" : "")
                  .c_str()
            : "");
  }
  const std::string schedule = t.schedule == Schedule::k2BW
                                   ? absl::StrCat("2bw (", ToString(t.update), " updates)")
                                   : ToString(t.schedule);
  std::printf("training: %s, global batch %d = %d microbatches x %d, schedule %s, %s lr %g%s\n",
              t.steps > 0 ? absl::StrCat(t.steps, " steps").c_str()
                          : absl::StrCat(t.epochs, " epochs").c_str(),
              t.global_batch, t.microbatches, t.MicrobatchSize(), schedule.c_str(),
              std::string(ToString(t.optimizer.kind)).c_str(), t.optimizer.lr,
              t.precision == Precision::kBf16 ? ", bf16 products" : "");
  if (spec.Replicas() > 1) PrintReplicas(spec, layers);
  std::printf("data: %s (%s%s), gateway %s, dashboard http://%s\n",
              std::string(ToString(spec.data.kind)).c_str(), spec.data.path.c_str(),
              spec.data.kind == DatasetKind::kText
                  ? absl::StrCat(spec.data.format == DataFormat::kTokens ? ", token shards" : "",
                                 ", tokenizer ", spec.data.tokenizer)
                        .c_str()
                  : "",
              spec.gateway.address.c_str(), spec.dashboard.address.c_str());

  for (size_t s = 0; s < spec.sites.size(); ++s) {
    const SiteSpec& site = spec.sites[s];
    int64_t params = 0;
    for (int i = site.layers.start; i < site.layers.end; ++i) params += layers[i].param_count;
    if (site.plan_layers) {
      std::printf(
          "\nsite %-10s layers auto  %s x%d  (planned from the sites' profiles when they join; "
          "`strait plan` shows the plan offline)\n",
          site.id.c_str(), std::string(ToString(site.device)).c_str(), site.workers);
    } else {
      std::printf("\nsite %-10s layers [%d, %d)  %s x%d  %s parameters%s\n", site.id.c_str(),
                  site.layers.start, site.layers.end, std::string(ToString(site.device)).c_str(),
                  site.workers, Thousands(params).c_str(),
                  spec.Replicas() > 1
                      ? absl::StrCat("  (replicas: ", ReplicasOf(spec, s), ")").c_str()
                      : "");
    }
    if (site.machines > 1) {
      // The site's ranks: each microbatch split over its replicas x workers, each replica's layers
      // split over its tensor ranks; gradients summed in process, then across the replicas.
      std::printf("  %d ranks (rank 0 leads: joins the gateway, seals, checkpoints)",
                  site.machines);
      if (site.tensor_parallel > 1) {
        std::printf(
            " = %d tensor ranks x %d data-parallel rank(s): every Linear, attention head and MLP "
            "of "
            "the site split %d ways (Megatron-style, Gloo between them)",
            site.tensor_parallel, site.data_parallel(), site.tensor_parallel);
      }
      std::printf(
          "; each replica %d %s worker(s): a microbatch of %d split %d ways, gradients summed in "
          "process, then across replicas with %s\n",
          site.workers, std::string(ToString(site.device)).c_str(), spec.training.MicrobatchSize(),
          site.parts(), site.device == DeviceKind::kCpu ? "Gloo (TCP)" : "NCCL");
    }
    for (int i = site.layers.start; i < site.layers.end; ++i) {
      const LayerLayout& l = layers[i];
      std::printf("  %3d  %-14s %12s -> %-12s %12s params\n", i, l.name.c_str(),
                  ShapeToString(l.in_shape).c_str(), ShapeToString(l.out_shape).c_str(),
                  Thousands(l.param_count).c_str());
    }
    if (s + 1 < spec.sites.size() && site.plan_layers) {
      const LinkSpec& link = spec.links[s];
      std::printf("  -> boundary %zu to %s: where the plan cuts; forward %s, backward %s, %s\n", s,
                  spec.sites[s + 1].id.c_str(), link.forward.c_str(), link.backward.c_str(),
                  link.encryption ? "encrypted" : "NOT encrypted");
    } else if (s + 1 < spec.sites.size()) {
      const LinkSpec& link = spec.links[s];
      std::vector<int64_t> shape = layers[site.layers.end - 1].out_shape;
      shape.insert(shape.begin(), t.MicrobatchSize());
      std::printf(
          "  -> boundary %zu to %s: %s fp32 = %s per microbatch each way; forward %s, backward "
          "%s, %s\n",
          s, spec.sites[s + 1].id.c_str(), ShapeToString(shape).c_str(),
          HumanBytes(4.0 * NumElements(shape)).c_str(), link.forward.c_str(), link.backward.c_str(),
          link.encryption ? "encrypted" : "NOT encrypted");
    }
  }
  if (spec.has_teacher) PrintTeacher(spec);
}

// A SentencePiece model is checked against model.vocab where it is present (loading one takes
// milliseconds); a machine without it, such as the gateway's, may still check the file.
absl::Status CheckTokenizer(const JobSpec& spec, bool quiet) {
  if (spec.data.kind != DatasetKind::kText || spec.data.tokenizer == "bytes") {
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<site::Tokenizer>> t =
      site::LoadTokenizer(spec.data, spec.model.gpt);
  if (t.status().code() == absl::StatusCode::kNotFound) {
    if (!quiet) {
      std::fprintf(stderr, "note: the tokenizer's vocabulary is not checked here: %s\n",
                   std::string(t.status().message()).c_str());
    }
    return absl::OkStatus();
  }
  return t.status();
}

int RunCheck(const std::vector<std::string>& files, bool quiet) {
  int exit_code = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<JobSpec> spec = LoadJobSpec(files[i]);
    if (absl::Status s = spec.ok() ? CheckTokenizer(*spec, quiet) : spec.status(); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      exit_code = 2;
      continue;
    }
    if (i > 0 && !quiet) std::printf("\n");
    std::printf("%s: OK\n", files[i].c_str());
    if (!quiet) PrintSplit(*spec);
  }
  return exit_code;
}

}  // namespace

void AddConfigCommand(CLI::App& app, int* exit_code) {
  CLI::App* config = app.add_subcommand("config", "Work with job specs (federation YAML files)");
  config->require_subcommand(1);
  CLI::App* check = config->add_subcommand(
      "check",
      "Validate job specs; print each site's layers, shapes, parameter counts and the bytes "
      "that cross each boundary. Exit code 2 when a file is invalid.");
  auto files = std::make_shared<std::vector<std::string>>();
  auto quiet = std::make_shared<bool>(false);
  check->add_option("files", *files, "Job spec files")->required()->type_name("FILE");
  check->add_flag("-q,--quiet", *quiet, "Print only OK or the error for each file");
  check->callback([=] { *exit_code = RunCheck(*files, *quiet); });
}

}  // namespace strait::tools
