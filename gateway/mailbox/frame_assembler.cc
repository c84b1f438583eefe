#include "gateway/mailbox/frame_assembler.h"

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"
#include "core/status.h"

namespace strait::gateway {

FrameAssembler::FrameAssembler(const JobSpec& spec, uint64_t max_frame_bytes,
                               size_t max_open_transfers)
    : spec_(spec), max_frame_bytes_(max_frame_bytes), max_open_transfers_(max_open_transfers) {}

absl::StatusOr<FrameAssembler::Event> FrameAssembler::Add(v1::PushChunk chunk,
                                                          std::shared_ptr<StoredFrame>* dropped) {
  const uint64_t id = chunk.transfer_id();
  dropped->reset();
  // Every error drops the transfer (so a broken transfer never lingers) and reports its bytes,
  // unless this very chunk started it: the caller reserves a transfer's bytes only after Add
  // reports it started, so there is nothing to release yet.
  bool started_now = false;
  auto fail = [&](std::string message) {
    std::shared_ptr<StoredFrame> frame = Drop(id);
    if (!started_now) *dropped = std::move(frame);
    return absl::InvalidArgumentError(absl::StrCat("transfer ", id, ": ", message));
  };
  std::string* data = chunk.mutable_chunk()->mutable_data();
  if (data->size() > kMaxChunkBytes) {
    return fail(absl::StrCat("chunk of ", data->size(), " bytes; at most ", kMaxChunkBytes));
  }
  Event event{.transfer_id = id};
  auto it = open_.find(id);
  if (chunk.chunk().index() == 0) {
    if (it != open_.end()) return fail("started twice");
    if (!chunk.has_header()) return fail("first chunk has no header");
    if (absl::Status s = ValidateFrameHeader(chunk.header(), spec_, max_frame_bytes_); !s.ok()) {
      return fail(std::string(s.message()));
    }
    if (open_.size() >= max_open_transfers_) {
      return fail(
          absl::StrCat("more than ", max_open_transfers_, " incomplete transfers on one stream"));
    }
    Partial partial;
    partial.frame = std::make_shared<StoredFrame>(std::move(*chunk.mutable_header()));
    it = open_.emplace(id, std::move(partial)).first;
    started_now = true;
    event.started = true;
  } else {
    if (it == open_.end())
      return fail(absl::StrCat("chunk ", chunk.chunk().index(), " before chunk 0"));
    if (chunk.has_header()) return fail("only the first chunk carries a header");
    if (chunk.chunk().index() != it->second.next_index) {
      return fail(absl::StrCat("chunk ", chunk.chunk().index(), " arrived; expected chunk ",
                               it->second.next_index));
    }
    ++it->second.next_index;
  }

  Partial& partial = it->second;
  const uint64_t wire_bytes = partial.frame->header.wire_bytes();
  partial.received += data->size();
  if (partial.received > wire_bytes) {
    return fail(absl::StrCat("sent more than its ", wire_bytes, " wire bytes"));
  }
  const bool last = partial.next_index == partial.frame->chunk_count();
  // Checked before the last chunk joins the frame: a reader must never see a complete frame of the
  // wrong size.
  if (last && partial.received != wire_bytes) {
    return fail(absl::StrCat("ended after ", partial.received, " of ", wire_bytes, " wire bytes"));
  }
  partial.frame->AddChunk(std::move(*data));
  event.frame = partial.frame;
  if (!last) return event;
  event.completed = true;
  open_.erase(it);
  return event;
}

std::shared_ptr<StoredFrame> FrameAssembler::Drop(uint64_t transfer_id) {
  auto it = open_.find(transfer_id);
  if (it == open_.end()) return nullptr;
  std::shared_ptr<StoredFrame> frame = std::move(it->second.frame);
  open_.erase(it);
  frame->BreakOff();
  return frame;
}

std::vector<std::shared_ptr<StoredFrame>> FrameAssembler::DropAll() {
  std::vector<std::shared_ptr<StoredFrame>> frames;
  for (auto& [id, partial] : open_) {
    partial.frame->BreakOff();
    frames.push_back(std::move(partial.frame));
  }
  open_.clear();
  return frames;
}

}  // namespace strait::gateway
