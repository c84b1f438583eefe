#include "core/tensor_key.h"

#include "absl/strings/str_cat.h"

namespace strait {

int ProducerStage(const v1::TensorKey& key, int stages) {
  if (key.purpose() == v1::MOVE) return static_cast<int>(key.boundary());
  if (key.purpose() == v1::TIED) return key.direction() == v1::FORWARD ? 0 : stages - 1;
  return static_cast<int>(key.boundary()) + (key.direction() == v1::BACKWARD ? 1 : 0);
}

int ConsumerStage(const v1::TensorKey& key, int stages) {
  if (key.purpose() == v1::MOVE) return static_cast<int>(key.microbatch());
  if (key.purpose() == v1::TIED) return key.direction() == v1::FORWARD ? stages - 1 : 0;
  return static_cast<int>(key.boundary()) + (key.direction() == v1::FORWARD ? 1 : 0);
}

namespace {

// Serving (proto Purpose SERVE): FORWARD boundary S - 1 is the client's prompt, through the
// gateway.
bool IsPrompt(const v1::TensorKey& key, const JobSpec& spec) {
  return key.direction() == v1::FORWARD && static_cast<int>(key.boundary()) == spec.Stages() - 1;
}

// ValidateTensorKey of a TEACH key (knowledge sharing: core/teach_links.h).
absl::Status ValidateTeachKey(const v1::TensorKey& key, const JobSpec& spec) {
  if (!spec.has_teacher) return absl::InvalidArgumentError("teacher key in a job without one");
  if (key.direction() == v1::BACKWARD) {
    if (key.boundary() != 0 || key.microbatch() != 0 || key.replica() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "teacher pace key of boundary ", key.boundary(), ", microbatch ", key.microbatch(),
          ", replica ", key.replica(), "; expected boundary 0, microbatch 0, replica 0"));
    }
    return absl::OkStatus();
  }
  if (key.replica() != 0 || key.boundary() >= static_cast<uint32_t>(spec.TeacherStages()) ||
      key.microbatch() >= static_cast<uint32_t>(spec.training.microbatches)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "teacher key from teacher stage ", key.boundary(), ", microbatch ", key.microbatch(),
        ", replica ", key.replica(), "; expected a stage of 0..", spec.TeacherStages() - 1,
        ", a microbatch below ", spec.training.microbatches, ", replica 0"));
  }
  return absl::OkStatus();
}

// ValidateTensorKey of a SERVE key (serving: proto Purpose SERVE).
absl::Status ValidateServeKey(const v1::TensorKey& key, const JobSpec& spec) {
  const uint32_t boundaries = key.direction() == v1::FORWARD ? spec.sites.size() : 2;
  if (spec.serving.clients.empty() || key.replica() != 0 || key.boundary() >= boundaries ||
      key.microbatch() >= static_cast<uint32_t>(spec.model.gpt.context)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "serving key of boundary ", key.boundary(), ", position ", key.microbatch(), ", replica ",
        key.replica(),
        spec.serving.clients.empty() ? " in a job that serves nobody"
                                     : absl::StrCat("; expected a boundary below ", boundaries,
                                                    ", a position below the context ",
                                                    spec.model.gpt.context, ", replica 0")));
  }
  return absl::OkStatus();
}

}  // namespace

int ProducerSlot(const v1::TensorKey& key, const JobSpec& spec) {
  if (key.purpose() == v1::SERVE) {
    if (key.direction() == v1::BACKWARD) return spec.Stages() - 1;
    return IsPrompt(key, spec) ? -1 : static_cast<int>(key.boundary());
  }
  if (key.purpose() == v1::TEACH) {
    // BACKWARD: the pace of the teacher, from the student's last stage (of the one pipeline).
    return key.direction() == v1::BACKWARD ? spec.Stages() - 1
                                           : spec.SiteSlots() + static_cast<int>(key.boundary());
  }
  if (key.purpose() == v1::SUM && key.direction() == v1::BACKWARD) return -1;
  const int stage = key.purpose() == v1::SUM ? static_cast<int>(key.boundary())
                                             : ProducerStage(key, spec.Stages());
  return static_cast<int>(key.replica()) * spec.Stages() + stage;
}

int ConsumerSlot(const v1::TensorKey& key, const JobSpec& spec) {
  if (key.purpose() == v1::SERVE) {
    if (key.direction() == v1::BACKWARD) return key.boundary() == 0 ? 0 : -1;
    return IsPrompt(key, spec) ? 0 : static_cast<int>(key.boundary()) + 1;
  }
  if (key.purpose() == v1::TEACH) {
    if (key.direction() == v1::BACKWARD) return spec.SiteSlots();  // The teacher's first stage.
    const int next = static_cast<int>(key.boundary()) + 1;
    // The teacher's last stage sends to the student's last stage (of the one pipeline).
    return next < spec.TeacherStages() ? spec.SiteSlots() + next : spec.Stages() - 1;
  }
  if (key.purpose() == v1::SUM && key.direction() == v1::FORWARD) return -1;
  const int stage = key.purpose() == v1::SUM ? static_cast<int>(key.boundary())
                                             : ConsumerStage(key, spec.Stages());
  return static_cast<int>(key.replica()) * spec.Stages() + stage;
}

absl::Status ValidateTensorKey(const v1::TensorKey& key, const JobSpec& spec) {
  if (key.job() != spec.name) {
    return absl::InvalidArgumentError(absl::StrCat("tensor key names job '", key.job(),
                                                   "'; this federation is '", spec.name, "'"));
  }
  if (key.direction() != v1::FORWARD && key.direction() != v1::BACKWARD) {
    return absl::InvalidArgumentError(absl::StrCat("tensor key has direction ", key.direction(),
                                                   "; expected FORWARD or BACKWARD"));
  }
  if (key.replica() >= static_cast<uint32_t>(spec.Replicas())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor key has replica ", key.replica(),
                                                   "; this federation has ", spec.Replicas()));
  }
  if (key.purpose() == v1::SUM) {
    if (spec.Replicas() < 2) return absl::InvalidArgumentError("sum key in a job without replicas");
    const uint32_t lanes = key.microbatch();
    if (key.boundary() >= static_cast<uint32_t>(spec.Stages()) ||
        (lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sum key of stage ", key.boundary(), " with ", lanes,
                       " values a word; expected a stage of 0..", spec.Stages() - 1,
                       " and 1, 2, 4 or 8 values a word"));
    }
    return absl::OkStatus();
  }
  if (key.purpose() == v1::TEACH) return ValidateTeachKey(key, spec);
  if (key.purpose() == v1::SERVE) return ValidateServeKey(key, spec);
  if (key.purpose() == v1::MOVE) {
    const auto stages = static_cast<uint32_t>(spec.sites.size());
    if (!spec.SplitMayMove()) {
      return absl::InvalidArgumentError("layer-move key in a job whose split is not planned");
    }
    if (key.direction() != v1::FORWARD || key.boundary() >= stages || key.microbatch() >= stages ||
        key.boundary() == key.microbatch()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer-move key from stage ", key.boundary(), " to stage ", key.microbatch(),
                       "; expected two stages of 0..", stages - 1, ", FORWARD"));
    }
    return absl::OkStatus();
  }
  if (key.boundary() + 1 >= spec.sites.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor key has boundary ", key.boundary(),
                                                   "; this federation has boundaries 0..",
                                                   static_cast<int>(spec.sites.size()) - 2));
  }
  switch (key.purpose()) {
    case v1::TRAIN:
      break;
    case v1::CLIP:
      if (key.microbatch() != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("clipping key has microbatch ", key.microbatch(), "; expected 0"));
      }
      return absl::OkStatus();
    case v1::EVAL:
      if (key.direction() != v1::FORWARD) {
        return absl::InvalidArgumentError("evaluation keys go FORWARD only");
      }
      return absl::OkStatus();
    case v1::TIED:
      if (!spec.model.IsLanguageModel() || !spec.model.gpt.tie_embeddings) {
        return absl::InvalidArgumentError(
            "tied-embedding key in a job without model.tie_embeddings");
      }
      if (key.boundary() != 0 || key.microbatch() != 0) {
        return absl::InvalidArgumentError(absl::StrCat("tied-embedding key has boundary ",
                                                       key.boundary(), " and microbatch ",
                                                       key.microbatch(), "; expected 0 and 0"));
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor key has purpose ", key.purpose(),
                       "; expected TRAIN, CLIP, EVAL, TIED, MOVE, SUM, TEACH or SERVE"));
  }
  if (key.microbatch() >= static_cast<uint32_t>(spec.training.microbatches)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor key has microbatch ", key.microbatch(),
                                                   "; a step has ", spec.training.microbatches));
  }
  return absl::OkStatus();
}

std::string TensorKeyToString(const v1::TensorKey& key) {
  const char* direction = key.direction() == v1::FORWARD    ? "fwd"
                          : key.direction() == v1::BACKWARD ? "bwd"
                                                            : "dir?";
  const char* purpose = key.purpose() == v1::TRAIN   ? ""
                        : key.purpose() == v1::CLIP  ? "/clip"
                        : key.purpose() == v1::EVAL  ? "/eval"
                        : key.purpose() == v1::TIED  ? "/tied"
                        : key.purpose() == v1::MOVE  ? "/move"
                        : key.purpose() == v1::SUM   ? "/sum"
                        : key.purpose() == v1::TEACH ? "/teach"
                        : key.purpose() == v1::SERVE ? "/serve"
                                                     : "/purpose?";
  return absl::StrCat(key.job(), "/s", key.step(), "/m", key.microbatch(), "/b", key.boundary(),
                      "/", direction, "/g", key.generation(), purpose,
                      key.replica() > 0 ? absl::StrCat("/r", key.replica()) : "");
}

}  // namespace strait
