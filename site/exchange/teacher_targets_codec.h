// The teacher's targets on the wire (knowledge sharing, docs/distillation.md): one microbatch's
// top-k indices and probabilities as bytes, which the link then seals like any frame. Little
// endian:
//   u8 version (1) | u8 values (0 fp16, 1 int8) | u8 index bytes (2, or 4 past 65536 classes) |
//   u8 0 | u32 rows | u16 k | per row: k indices, then
//     fp16: k probabilities as IEEE half;
//     int8: log of the row's largest probability as IEEE half, then k steps s_i (u8) with
//           p_i = exp(log p_max - s_i / 16) (steps of 1/16 nat; 255 = at least 15.9 nats below).
// A row whose decoded probabilities sum past 1 is scaled back to 1. The decoder trusts nothing:
// every size, index and value is checked against the rows and classes the student expects.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/nn/teacher_targets.h"

namespace strait::site {

// The size of EncodeTeacherTargets' output for `rows` rows of top `k` over `classes` classes.
uint64_t TeacherTargetsBytes(int64_t rows, int k, TeacherValues values, int classes);

// The bytes of `targets` (indices below `classes`).
std::string EncodeTeacherTargets(const TeacherTargets& targets, TeacherValues values, int classes);

// The targets in `bytes`, which must hold `rows` rows over `classes` classes: DATA_LOSS naming the
// first thing wrong (size, version, value kind, k, an index out of range or repeated in its row,
// a probability that is not one).
absl::StatusOr<TeacherTargets> DecodeTeacherTargets(std::string_view bytes, int64_t rows,
                                                    int classes);

// What the student receives for `targets`: encoded and decoded again. `strait train` teaches with
// this, so that a federation with lossless links equals it bit for bit.
absl::StatusOr<TeacherTargets> AsReceived(const TeacherTargets& targets, TeacherValues values,
                                          int classes);

}  // namespace strait::site
