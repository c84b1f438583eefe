#include "harness/job_spec_rewrite.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "core/job_spec.h"

namespace strait::harness {
namespace {

absl::Status CheckChain(const char* option, const std::string& chain) {
  if (chain.empty()) return absl::OkStatus();
  absl::StatusOr<compression::ChainSpec> parsed = compression::ParseChainSpec(chain);
  if (parsed.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(option, " '", chain, "': ", parsed.status().message()));
}

}  // namespace

absl::StatusOr<RewrittenJobSpec> RewriteJobSpec(const std::string& path,
                                                const JobSpecOverrides& overrides) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(path);
  if (!spec.ok()) return spec.status();
  JobSpecOverrides o = overrides;
  if (o.forward_codec.empty()) o.forward_codec = o.codec;
  if (o.backward_codec.empty()) o.backward_codec = o.codec;
  if (absl::Status s = CheckChain("forward codec", o.forward_codec); !s.ok()) return s;
  if (absl::Status s = CheckChain("backward codec", o.backward_codec); !s.ok()) return s;

  YAML::Node root = YAML::LoadFile(path);  // Parsed once already: it cannot throw now.
  // Certificates: the federation's own, made by the caller under certs/ (the defaults).
  root.remove("tls");
  if (root["dashboard"] && root["dashboard"]["token_file"]) {
    root["dashboard"]["token_file"] = spec->dashboard.token_file;
  }
  if (root["data"] && root["data"]["path"]) root["data"]["path"] = spec->data.path;
  if (root["data"] && root["data"]["tokenizer"]) {  // "bytes", or a model's resolved path.
    root["data"]["tokenizer"] = spec->data.tokenizer;
  }
  if (spec->has_teacher) {  // Its checkpoint and tokenizer, resolved against the file.
    root["teacher"]["checkpoint"] = spec->teacher.checkpoint;
    if (root["teacher"]["tokenizer"]) root["teacher"]["tokenizer"] = spec->data.tokenizer;
  }
  root["training"]["checkpoint"]["dir"] = "checkpoints";
  if (o.steps > 0) {
    root["training"].remove("epochs");
    root["training"]["steps"] = o.steps;
  }
  if (o.global_batch > 0) root["training"]["global_batch"] = o.global_batch;
  if (o.microbatches > 0) root["training"]["microbatches"] = o.microbatches;
  if (!o.schedule.empty()) root["training"]["schedule"] = o.schedule;
  // 2bw cannot evaluate between steps (the loader refuses it): its run is evaluated at the end
  // only.
  if (o.schedule == "2bw") root["training"].remove("eval_every");
  if (o.extra_in_flight >= 0) root["training"]["extra_in_flight"] = o.extra_in_flight;
  if (o.checkpoint_every > 0) root["training"]["checkpoint"]["every"] = o.checkpoint_every;
  if (o.lookahead >= 0) root["training"]["lookahead"] = o.lookahead;
  if (!o.update.empty()) root["training"]["update"] = o.update;
  if (!o.stale_gradients.empty()) root["training"]["stale_gradients"] = o.stale_gradients;
  if (o.grad_clip >= 0) root["training"]["grad_clip"] = o.grad_clip;
  if (!o.chunk_size.empty()) root["gateway"]["chunk_size"] = o.chunk_size;
  if (!o.sync.empty()) root["training"]["sync"] = o.sync;
  if (o.sync == "every_step") root["training"].remove("outer");
  if (o.outer_every > 0) root["training"]["outer"]["every"] = o.outer_every;
  if (o.outer_bits > 0) root["training"]["outer"]["bits"] = o.outer_bits;
  if (o.outer_fragments > 0) root["training"]["outer"]["fragments"] = o.outer_fragments;
  if (o.outer_delay >= 0) root["training"]["outer"]["delay"] = o.outer_delay;
  if (o.outer_lr >= 0) root["training"]["outer"]["lr"] = o.outer_lr;
  if (o.outer_momentum >= 0) root["training"]["outer"]["momentum"] = o.outer_momentum;
  for (size_t i = 0; i < o.layers.size() && i < root["sites"].size(); ++i) {
    YAML::Node range(YAML::NodeType::Sequence);
    range.SetStyle(YAML::EmitterStyle::Flow);
    range.push_back(o.layers[i].start);
    range.push_back(o.layers[i].end);
    root["sites"][i]["layers"] = range;
  }
  if (!o.forward_codec.empty() || !o.backward_codec.empty()) {
    // Every boundary gets a link entry (the defaults are lossless), then the overrides.
    YAML::Node links(YAML::NodeType::Sequence);
    for (const LinkSpec& l : spec->links) {
      YAML::Node link;
      YAML::Node between(YAML::NodeType::Sequence);
      between.SetStyle(YAML::EmitterStyle::Flow);
      between.push_back(spec->sites[l.boundary].id);
      between.push_back(spec->sites[l.boundary + 1].id);
      link["between"] = between;
      link["forward"] = o.forward_codec.empty() ? l.forward : o.forward_codec;
      link["backward"] = o.backward_codec.empty() ? l.backward : o.backward_codec;
      link["encryption"] = l.encryption;
      links.push_back(link);
    }
    if (root["links"]) {
      // Keep the keys written there that are not codecs (rotate_bytes, ...).
      for (const YAML::Node& written : root["links"]) {
        for (YAML::Node link : links) {
          if (link["between"][0].Scalar() != written["between"][0].Scalar()) continue;
          for (const auto& kv : written) {
            const std::string key = kv.first.Scalar();
            if (key != "forward" && key != "backward" && key != "between") link[key] = kv.second;
          }
        }
      }
    }
    root["links"] = links;
  }
  YAML::Emitter out;
  out << root;
  std::string text = std::string(out.c_str()) + "\n";
  // The rewrite must stay a valid job spec (an override can still be refused, e.g. a codec the
  // loader's cross-checks reject).
  absl::StatusOr<JobSpec> check = ParseJobSpec(text, "rewritten " + path, "/");
  if (!check.ok()) return check.status();
  return RewrittenJobSpec{std::move(text), *std::move(check)};
}

}  // namespace strait::harness
