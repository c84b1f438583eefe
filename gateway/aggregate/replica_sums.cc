#include "gateway/aggregate/replica_sums.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "compression/codec_chain.h"
#include "core/frame_header.h"

namespace strait::gateway {
namespace {

// replicas[s]: the site ids of stage s's replicas.
std::vector<std::vector<std::string>> StageReplicas(const JobSpec& spec) {
  std::vector<std::vector<std::string>> out;
  for (int s = 0; s < spec.Stages(); ++s) out.push_back(spec.StageReplicaIds(s));
  return out;
}

// The words of a complete SUM frame (chain `none`, not sealed), decoded with every length checked.
absl::StatusOr<std::vector<uint32_t>> WordsOf(const StoredFrame& frame) {
  if (frame.header.sealed()) {
    return absl::InvalidArgumentError("a masked vector must not be sealed: the gateway adds it");
  }
  if (frame.header.codec_chain() != "none") {  // A compressed length would depend on the values.
    return absl::InvalidArgumentError(absl::StrCat("a masked vector's chain must be none, not '",
                                                   frame.header.codec_chain(), "'"));
  }
  std::string body;
  body.reserve(frame.wire_bytes());
  for (uint32_t i = 0; i < frame.chunk_count(); ++i) body += frame.chunk(i);
  compression::TensorDecoder decoder(
      compression::CodecOptions{.max_raw_bytes = frame.header.raw_bytes()});
  compression::DecodedTensor tensor;
  STRAIT_RETURN_IF_ERROR(
      decoder.Decode({reinterpret_cast<const uint8_t*>(body.data()), body.size()}, &tensor));
  if (tensor.shape.size() != 1 ||
      tensor.values.size() * sizeof(float) != frame.header.raw_bytes()) {
    return absl::InvalidArgumentError(
        "a masked vector is one dimension of words, as its header says");
  }
  std::vector<uint32_t> words(tensor.values.size());
  std::memcpy(words.data(), tensor.values.data(), words.size() * sizeof(uint32_t));
  return words;
}

}  // namespace

ReplicaSums::ReplicaSums(const JobSpec& spec, Mailbox& mailbox, Federation& federation)
    : spec_(spec), mailbox_(mailbox), federation_(federation), sums_(StageReplicas(spec)) {}

void ReplicaSums::Take(int slot, const FramePtr& frame) {
  const v1::TensorKey& key = frame->header.key();
  absl::StatusOr<std::vector<uint32_t>> words = WordsOf(*frame);
  // Out of the mailbox either way: nobody pulls a masked vector.
  mailbox_.Ack(MailboxKey::From(key)).IgnoreError();
  const std::string& site = spec_.SiteIdAt(slot);
  absl::Status added = words.status();
  const SumRound round{static_cast<int>(key.boundary()), key.step(), key.generation()};
  const int lanes = static_cast<int>(key.microbatch());  // ValidateTensorKey: 1, 2, 4 or 8.
  bool opened = false;  // This vector opens its round (whose time runs from here).
  if (added.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      opened = opened_.emplace(round, std::chrono::steady_clock::now()).second;
    }
    added = sums_.Add(
        site, round, *std::move(words),
        // Each replica's vector is answered with the sum for that replica.
        [this, round, lanes, replica = key.replica()](absl::StatusOr<std::vector<uint32_t>> sum) {
          if (sum.ok()) Publish(round, replica, *sum, lanes);
        },
        lanes);
  }
  if (!added.ok()) {
    if (opened) {
      std::lock_guard<std::mutex> lock(mu_);
      opened_.erase(round);
    }
    federation_.CountRejected("sum_refused",
                              absl::StrCat("masked vector from ", site, ": ", added.message()));
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_in += frame->wire_bytes();
}

void ReplicaSums::SiteFailed(int slot, const std::string& why) {
  if (slot >= spec_.SiteSlots()) return;  // A teacher site: in no sum.
  sums_.Abort(spec_.SiteIdAt(slot), why);
}

void ReplicaSums::Publish(const SumRound& round, uint32_t replica, const std::vector<uint32_t>& sum,
                          int lanes) {
  std::vector<float> values(sum.size());
  std::memcpy(values.data(), sum.data(), sum.size() * sizeof(uint32_t));
  absl::StatusOr<std::unique_ptr<compression::CodecChain>> chain =
      compression::CodecChain::Create("none");
  absl::StatusOr<absl::Span<const uint8_t>> body =
      chain.ok() ? (*chain)->Encode(values, {values.size()})
                 : absl::StatusOr<absl::Span<const uint8_t>>(chain.status());
  if (!body.ok()) {
    spdlog::error("cannot encode the sum of stage {}: {}", round.stage,
                  std::string(body.status().message()));
    return;
  }
  const FramePieces pieces = CutIntoPieces(body->size(), spec_.gateway.chunk_size);
  std::vector<std::string> chunks;
  for (uint32_t i = 0; i < pieces.count; ++i) {
    const size_t at = i * pieces.bytes;
    chunks.emplace_back(reinterpret_cast<const char*>(body->data()) + at,
                        std::min<size_t>(pieces.bytes, body->size() - at));
  }
  v1::FrameHeader header;
  v1::TensorKey& key = *header.mutable_key();
  key.set_job(spec_.name);
  key.set_step(round.step);
  key.set_microbatch(static_cast<uint32_t>(lanes));
  key.set_boundary(static_cast<uint32_t>(round.stage));
  key.set_direction(v1::BACKWARD);
  key.set_generation(round.generation);
  key.set_purpose(v1::SUM);
  key.set_replica(replica);
  header.set_codec_chain("none");
  header.set_dtype(v1::FLOAT32);
  header.add_shape(static_cast<int64_t>(values.size()));
  header.set_raw_bytes(values.size() * sizeof(float));
  header.set_wire_bytes(body->size());
  header.set_chunk_count(pieces.count);
  auto frame = std::make_shared<StoredFrame>(std::move(header), chunks);
  // Stored once the budget has room for it; the replica's pull waits until then.
  auto store = [this, frame] { mailbox_.Store(frame); };
  absl::StatusOr<bool> reserved = mailbox_.Reserve(frame->wire_bytes(), store);
  if (!reserved.ok()) {
    spdlog::error("the sum of stage {} does not fit the gateway's memory budget: {}", round.stage,
                  std::string(reserved.status().message()));
    return;
  }
  if (*reserved) store();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out += body->size();
  if (replica != 0) return;
  ++stats_.rounds;
  if (auto it = opened_.find(round); it != opened_.end()) {
    stats_.round_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
  }
  // Rounds summed, and any of older generations (rolled back before their sum), are over.
  std::erase_if(opened_, [&round](const auto& entry) {
    return entry.first.generation < round.generation || entry.first == round;
  });
}

v1::ReplicaSumsState ReplicaSums::Snapshot() const {
  const Stats stats = GetStats();
  v1::ReplicaSumsState state;
  state.set_rounds(stats.rounds);
  state.set_bytes_in(stats.bytes_in);
  state.set_bytes_out(stats.bytes_out);
  state.set_round_seconds(stats.round_seconds);
  return state;
}

ReplicaSums::Stats ReplicaSums::GetStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace strait::gateway
