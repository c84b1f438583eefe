#include "compression/frame_header.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace strait::compression {
namespace {

constexpr uint8_t kMagic[4] = {'S', 'T', 'C', 'F'};
constexpr uint8_t kFlagStochastic = 1, kFlagErrorFeedback = 2, kFlagFisher = 4, kFlagDithered = 8;

void Put64(uint64_t v, uint8_t* out) { std::memcpy(out, &v, 8); }
uint64_t Get64(const uint8_t* in) {
  uint64_t v;
  std::memcpy(&v, in, 8);
  return v;
}

uint64_t DoubleBits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return bits;
}

uint64_t StageParameter(const StageSpec& s) {
  switch (s.kind) {
    case StageKind::kInt8:
    case StageKind::kInt4:
      return static_cast<uint64_t>(s.block_size);
    case StageKind::kTopK:
      return DoubleBits(s.fraction);
    case StageKind::kKlt:
      return DoubleBits(s.step);
    case StageKind::kShuffle:
      return static_cast<uint64_t>(s.width);
    case StageKind::kZstd:
      return static_cast<uint64_t>(static_cast<int64_t>(s.level));
    case StageKind::kProject:
      return static_cast<uint64_t>(s.subspace);
    default:
      return 0;
  }
}

// Fills the fields of `s` that `parameter` carries; false when it cannot be one.
bool SetStageParameter(uint64_t parameter, StageSpec* s) {
  auto small = [&](int* field) {
    int64_t v = static_cast<int64_t>(parameter);
    if (v < -(1 << 20) || v > (1 << 20)) return false;
    *field = static_cast<int>(v);
    return true;
  };
  switch (s->kind) {
    case StageKind::kInt8:
    case StageKind::kInt4:
      return small(&s->block_size);
    case StageKind::kTopK:
      std::memcpy(&s->fraction, &parameter, 8);
      return true;
    case StageKind::kKlt:
      std::memcpy(&s->step, &parameter, 8);
      return true;
    case StageKind::kShuffle:
      return small(&s->width);
    case StageKind::kZstd:
      return small(&s->level);
    case StageKind::kProject:
      return small(&s->subspace);
    default:
      return parameter == 0;
  }
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed codec frame: ", what));
}

}  // namespace

uint64_t FrameHeaderSize(size_t rank, const ChainSpec& chain) {
  uint64_t size = FrameHeaderSize(rank, chain.stages.size());
  for (const StageSpec& s : chain.stages) {
    if (s.kind == StageKind::kProject) size += kProjectRecordExtra;
  }
  return size;
}

absl::StatusOr<uint64_t> ElementCount(absl::Span<const uint64_t> shape) {
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor rank ", shape.size(), " exceeds ", kMaxRank));
  }
  uint64_t count = 1;
  for (uint64_t dim : shape) {
    if (dim != 0 && count > UINT64_MAX / 4 / dim) {
      return absl::InvalidArgumentError("tensor shape overflows 64 bits");
    }
    count *= dim;
  }
  return count;
}

void WriteFrameHeader(const FrameHeader& header, uint8_t* out) {
  std::memcpy(out, kMagic, 4);
  out[4] = kFrameVersion;
  out[5] = kDtypeFloat32;
  out[6] = static_cast<uint8_t>(header.shape.size());
  out[7] = static_cast<uint8_t>(header.chain.stages.size());
  Put64(header.raw_size, out + 8);
  uint8_t* p = out + 16;
  for (uint64_t dim : header.shape) {
    Put64(dim, p);
    p += 8;
  }
  for (size_t i = 0; i < header.chain.stages.size(); ++i) {
    const StageSpec& s = header.chain.stages[i];
    p[0] = static_cast<uint8_t>(s.kind);
    p[1] = (s.stochastic ? kFlagStochastic : 0) | (s.error_feedback ? kFlagErrorFeedback : 0) |
           (s.fisher ? kFlagFisher : 0) | (s.dithered ? kFlagDithered : 0);
    Put64(StageParameter(s), p + 2);
    Put64(header.stage_sizes[i], p + 10);
    p += 18;
    if (s.kind == StageKind::kProject) {
      Put64(s.basis_seed, p);
      p += kProjectRecordExtra;
    }
  }
}

absl::Status ParseFrameHeader(absl::Span<const uint8_t> frame, uint64_t max_raw_bytes,
                              FrameHeader* header) {
  if (frame.size() < 16) return Malformed("shorter than a header");
  const uint8_t* f = frame.data();
  if (std::memcmp(f, kMagic, 4) != 0) return Malformed("bad magic");
  if (f[4] != kFrameVersion) return Malformed(absl::StrCat("unsupported version ", f[4]));
  if (f[5] != kDtypeFloat32) return Malformed(absl::StrCat("unsupported dtype ", f[5]));
  const size_t rank = f[6], stages = f[7];
  if (rank > kMaxRank) return Malformed(absl::StrCat("rank ", rank));
  if (stages < 1 || stages > 4) return Malformed(absl::StrCat("stage count ", stages));
  header->header_size = FrameHeaderSize(rank, stages);
  if (frame.size() < header->header_size) return Malformed("truncated header");
  header->raw_size = Get64(f + 8);
  header->shape.resize(rank);
  const uint8_t* p = f + 16;
  for (size_t i = 0; i < rank; ++i, p += 8) header->shape[i] = Get64(p);
  absl::StatusOr<uint64_t> count = ElementCount(header->shape);
  if (!count.ok()) return Malformed(count.status().message());
  if (header->raw_size != 4 * *count) return Malformed("raw size does not match the shape");
  if (header->raw_size > max_raw_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "codec frame of ", header->raw_size, " bytes exceeds the limit of ", max_raw_bytes));
  }
  header->chain.stages.resize(stages);
  header->stage_sizes.resize(stages);
  for (size_t i = 0; i < stages; ++i, p += 18) {
    StageSpec& s = header->chain.stages[i];
    s = StageSpec{};
    if (p[0] > static_cast<uint8_t>(StageKind::kKlt)) return Malformed("unknown stage kind");
    s.kind = static_cast<StageKind>(p[0]);
    if (p[1] & ~(kFlagStochastic | kFlagErrorFeedback | kFlagFisher | kFlagDithered)) {
      return Malformed("unknown stage flags");
    }
    s.stochastic = p[1] & kFlagStochastic;
    s.error_feedback = p[1] & kFlagErrorFeedback;
    s.fisher = p[1] & kFlagFisher;
    s.dithered = p[1] & kFlagDithered;
    bool rounds =
        s.kind == StageKind::kInt8 || s.kind == StageKind::kInt4 || s.kind == StageKind::kKlt;
    if ((s.stochastic && !rounds) || (s.error_feedback && s.kind != StageKind::kTopK) ||
        (s.fisher && s.kind != StageKind::kKlt) ||
        (s.dithered && (s.kind != StageKind::kKlt || !s.stochastic)) ||
        !SetStageParameter(Get64(p + 2), &s)) {
      return Malformed(absl::StrCat("bad parameters for stage '", StageName(s.kind), "'"));
    }
    header->stage_sizes[i] = Get64(p + 10);
    if (s.kind == StageKind::kProject) {  // its seed follows the record
      header->header_size += kProjectRecordExtra;
      if (frame.size() < header->header_size) return Malformed("truncated header");
      s.basis_seed = Get64(p + 18);
      p += kProjectRecordExtra;
    }
  }
  absl::Status valid = ValidateChainSpec(header->chain);
  if (!valid.ok()) return Malformed(valid.message());
  if (header->stage_sizes.back() != frame.size() - header->header_size) {
    return Malformed("payload length does not match the header");
  }
  return absl::OkStatus();
}

}  // namespace strait::compression
