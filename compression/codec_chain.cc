#include "compression/codec_chain.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compression/float_bits.h"

namespace strait::compression {
namespace {

absl::Span<const uint8_t> AsBytes(absl::Span<const float> values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)};
}

uint64_t RowWidth(absl::Span<const uint64_t> shape) { return shape.empty() ? 1 : shape.back(); }

// Device coders run the value stage where the tensor lives; a chain that projects first, or
// learns its link's basis (klt), has no such path.
absl::Status NoDevicePath(const ChainSpec& chain) {
  if (FindProject(chain) == nullptr && chain.stages[0].kind != StageKind::kKlt) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("codec chain '", chain.ToString(), "' starts with ",
                   StageName(chain.stages[0].kind), ", which only the host codec runs"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CodecChain>> CodecChain::Create(absl::string_view spec,
                                                               const CodecOptions& options) {
  STRAIT_ASSIGN_OR_RETURN(ChainSpec parsed, ParseChainSpec(spec));
  return Create(parsed, options);
}

std::unique_ptr<CodecChain> CodecChain::Create(const ChainSpec& spec, const CodecOptions& options) {
  return std::unique_ptr<CodecChain>(new CodecChain(spec, options));
}

CodecChain::CodecChain(const ChainSpec& spec, const CodecOptions& options)
    : spec_(spec), options_(options) {
  for (const StageSpec& stage : spec_.stages)
    stages_.push_back(MakeCodecStage(stage, options.klt_math));
  header_.chain = spec_;
}

uint64_t StreamSeed(uint64_t stream) {
  uint64_t state = CodecOptions{}.seed + stream * 0x9e3779b97f4a7c15ull;
  return SplitMix64(state);
}

uint64_t CodecChain::SeedOf(uint64_t call) const {
  return options_.seed + call * 0x9e3779b97f4a7c15ull;
}

absl::StatusOr<absl::Span<const uint8_t>> CodecChain::Encode(absl::Span<const float> values,
                                                             absl::Span<const uint64_t> shape,
                                                             ResidualStore* residuals,
                                                             absl::string_view key, uint64_t step) {
  STRAIT_ASSIGN_OR_RETURN(uint64_t count, ElementCount(shape));
  if (count != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape has ", count, " elements, the tensor ", values.size()));
  }
  EncodeContext context;
  context.element_count = count;
  context.seed = next_seed();
  context.gradients = options_.gradients.get();
  context.step = step;
  ++calls_;
  if (spec_.NeedsResidual()) {
    if (residuals == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "codec chain '", spec_.ToString(), "' uses error feedback and needs a ResidualStore"));
    }
    STRAIT_ASSIGN_OR_RETURN(context.residual, residuals->Get(key, count));
  }
  header_.shape.assign(shape.begin(), shape.end());
  return EncodeFrom(0, AsBytes(values), context);
}

absl::StatusOr<absl::Span<const uint8_t>> CodecChain::EncodeValuePayload(
    absl::Span<const uint8_t> payload, absl::Span<const uint64_t> shape) {
  STRAIT_ASSIGN_OR_RETURN(uint64_t count, ElementCount(shape));
  STRAIT_RETURN_IF_ERROR(NoDevicePath(spec_));
  if (!IsValueStage(spec_.stages[0].kind)) {
    return absl::FailedPreconditionError("codec chain has no value stage");
  }
  STRAIT_RETURN_IF_ERROR(stages_[0]->CheckSizes(4 * count, payload.size()));
  EncodeContext context;
  context.element_count = count;
  ++calls_;
  header_.shape.assign(shape.begin(), shape.end());
  header_.stage_sizes.resize(stages_.size());
  header_.stage_sizes[0] = payload.size();
  return EncodeFrom(1, payload, context);
}

absl::StatusOr<absl::Span<const uint8_t>> CodecChain::EncodeFrom(size_t first_stage,
                                                                 absl::Span<const uint8_t> in,
                                                                 const EncodeContext& context) {
  const size_t count = stages_.size();
  header_.raw_size = 4 * context.element_count;
  header_.stage_sizes.resize(count);
  header_.header_size = FrameHeaderSize(header_.shape.size(), spec_);
  frame_.Resize(header_.header_size);
  EncodeContext stage_context = context;
  for (size_t i = first_stage; i < count; ++i) {
    ByteBuffer* out = i + 1 == count ? &frame_ : &scratch_[i % 2];
    if (out != &frame_) out->Resize(0);
    const size_t base = out->size();
    stages_[i]->SetRowWidth(RowWidth(header_.shape));
    STRAIT_RETURN_IF_ERROR(stages_[i]->Encode(in, stage_context, out));
    header_.stage_sizes[i] = out->size() - base;
    in = absl::Span<const uint8_t>(out->data() + base, header_.stage_sizes[i]);
    // proj hands the next stage its coefficients: fp32 values, fewer of them.
    if (spec_.stages[i].kind == StageKind::kProject) stage_context.element_count = in.size() / 4;
  }
  if (first_stage == count) {  // the payload given to EncodeValuePayload is the whole encoding
    frame_.Resize(header_.header_size + in.size());
    if (!in.empty()) std::memcpy(frame_.data() + header_.header_size, in.data(), in.size());
  }
  WriteFrameHeader(header_, frame_.data());
  return frame_.span();
}

absl::Status CodecChain::Decode(absl::Span<const uint8_t> frame, DecodedTensor* out) {
  STRAIT_RETURN_IF_ERROR(ParseFrameHeader(frame, options_.max_raw_bytes, &header_));
  if (!(header_.chain == spec_)) {
    return absl::InvalidArgumentError(absl::StrCat("frame of codec chain '",
                                                   header_.chain.ToString(), "' given to chain '",
                                                   spec_.ToString(), "'"));
  }
  return DecodeWithHeader(frame, out);
}

absl::Status CodecChain::DecodeWithHeader(absl::Span<const uint8_t> frame, DecodedTensor* out) {
  const FrameHeader& h = header_;
  out->values.resize(h.raw_size / 4);
  out->shape = h.shape;
  out->chain = h.chain;
  return DecodeStages(
      frame, 0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(out->values.data()), h.raw_size));
}

absl::Status CodecChain::CheckStageSizes() {
  const FrameHeader& h = header_;
  for (size_t i = 0; i < stages_.size(); ++i) {
    stages_[i]->SetRowWidth(RowWidth(h.shape));
    STRAIT_RETURN_IF_ERROR(
        stages_[i]->CheckSizes(i == 0 ? h.raw_size : h.stage_sizes[i - 1], h.stage_sizes[i]));
  }
  return absl::OkStatus();
}

absl::Status CodecChain::DecodeStages(absl::Span<const uint8_t> frame, size_t last_stage,
                                      absl::Span<uint8_t> target) {
  const FrameHeader& h = header_;
  const size_t count = stages_.size();
  // Every size is plausible before anything is allocated.
  STRAIT_RETURN_IF_ERROR(CheckStageSizes());
  absl::Span<const uint8_t> in = frame.subspan(h.header_size);
  if (last_stage == count) {  // nothing to run: the body is what is wanted
    if (in.size() != target.size()) return SizeError("frame body", target.size(), in.size());
    if (!in.empty()) std::memcpy(target.data(), in.data(), in.size());
    return absl::OkStatus();
  }
  for (size_t i = count; i-- > last_stage;) {
    absl::Span<uint8_t> out = target;
    if (i > last_stage) {
      scratch_[i % 2].Resize(h.stage_sizes[i - 1]);
      out = absl::Span<uint8_t>(scratch_[i % 2].data(), h.stage_sizes[i - 1]);
    }
    STRAIT_RETURN_IF_ERROR(stages_[i]->Decode(in, out));
    in = out;
  }
  return absl::OkStatus();
}

absl::Status TensorDecoder::CheckAccepted() const {
  if (accepted_.empty() ||
      std::find(accepted_.begin(), accepted_.end(), header_.chain) != accepted_.end()) {
    return absl::OkStatus();
  }
  std::string agreed;
  for (const ChainSpec& c : accepted_)
    absl::StrAppend(&agreed, agreed.empty() ? "'" : ", '", c.ToString(), "'");
  return absl::InvalidArgumentError(absl::StrCat("frame of codec chain '", header_.chain.ToString(),
                                                 "'; this link accepts ", agreed));
}

absl::Status TensorDecoder::Decode(absl::Span<const uint8_t> frame, DecodedTensor* out) {
  STRAIT_RETURN_IF_ERROR(ParseFrameHeader(frame, options_.max_raw_bytes, &header_));
  STRAIT_RETURN_IF_ERROR(CheckAccepted());
  CodecChain& chain = ChainFor(header_.chain);
  chain.header_ = header_;
  return chain.DecodeWithHeader(frame, out);
}

CodecChain& TensorDecoder::ChainFor(const ChainSpec& spec) {
  for (const std::unique_ptr<CodecChain>& chain : chains_) {
    if (chain->spec() == spec) return *chain;
  }
  if (chains_.size() == kKeptChains) chains_.erase(chains_.begin());
  chains_.push_back(CodecChain::Create(spec, options_));
  return *chains_.back();
}

absl::Status TensorDecoder::DecodeValuePayload(absl::Span<const uint8_t> frame,
                                               DecodedPayload* out) {
  STRAIT_RETURN_IF_ERROR(ParseFrameHeader(frame, options_.max_raw_bytes, &header_));
  STRAIT_RETURN_IF_ERROR(CheckAccepted());
  STRAIT_RETURN_IF_ERROR(NoDevicePath(header_.chain));
  if (header_.chain.stages.empty() || !IsValueStage(header_.chain.stages[0].kind)) {
    return absl::FailedPreconditionError(absl::StrCat("codec chain '", header_.chain.ToString(),
                                                      "' has no value stage to decode elsewhere"));
  }
  CodecChain& chain = ChainFor(header_.chain);
  chain.header_ = header_;
  STRAIT_RETURN_IF_ERROR(chain.CheckStageSizes());  // before sizing a buffer to the header's word
  out->value_payload.resize(header_.stage_sizes[0]);
  out->element_count = header_.raw_size / 4;
  out->shape = header_.shape;
  out->chain = header_.chain;
  return chain.DecodeStages(frame, 1,
                            absl::Span<uint8_t>(out->value_payload.data(), header_.stage_sizes[0]));
}

}  // namespace strait::compression
