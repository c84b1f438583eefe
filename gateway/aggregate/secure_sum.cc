#include "gateway/aggregate/secure_sum.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strait::gateway {
namespace {

std::string RoundText(const SumRound& r) {
  return absl::StrCat("round of stage ", r.stage, ", step ", r.step, ", generation ", r.generation);
}

// sum += words lane by lane: each lane mod 2^(32 / lanes), no carry into the next lane.
void AddLanes(std::vector<uint32_t>& sum, const std::vector<uint32_t>& words, int lanes) {
  if (lanes == 1) {
    for (size_t i = 0; i < words.size(); ++i) sum[i] += words[i];  // mod 2^32
    return;
  }
  // The high bit of each lane is added apart so that no carry crosses into the next lane.
  const int bits = 32 / lanes;
  uint32_t high = 0;
  for (int l = 0; l < lanes; ++l) high |= uint32_t{1} << (bits * l + bits - 1);
  for (size_t i = 0; i < words.size(); ++i) {
    const uint32_t a = sum[i], b = words[i];
    sum[i] = ((a & ~high) + (b & ~high)) ^ ((a ^ b) & high);
  }
}

}  // namespace

SecureSum::SecureSum(std::vector<std::vector<std::string>> replicas)
    : replicas_(std::move(replicas)) {}

absl::Status SecureSum::Refuse(absl::Status status) {
  ++refused_[absl::StatusCodeToString(status.code())];
  return status;
}

absl::Status SecureSum::Add(const std::string& site, const SumRound& round,
                            std::vector<uint32_t> words, Done done, int lanes) {
  std::vector<Done> answer, stale;
  std::vector<uint32_t> sum;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (round.stage < 0 || round.stage >= static_cast<int>(replicas_.size()) ||
        std::find(replicas_[round.stage].begin(), replicas_[round.stage].end(), site) ==
            replicas_[round.stage].end()) {
      return Refuse(absl::PermissionDeniedError(
          absl::StrCat("site '", site, "' is not a replica of stage ", round.stage)));
    }
    if (round.generation < newest_generation_) {
      return Refuse(absl::FailedPreconditionError(
          absl::StrCat(RoundText(round), " is of a generation rolled back already")));
    }
    if (round.generation > newest_generation_) {  // A rollback: older rounds are over.
      newest_generation_ = round.generation;
      summed_.clear();
      for (auto& [old, open] : open_) {
        for (Done& d : open.waiting) stale.push_back(std::move(d));
      }
      open_.clear();
    }
    if (summed_.count(round) > 0) {
      return Refuse(absl::AlreadyExistsError(absl::StrCat(RoundText(round), " is summed already")));
    }
    Open& open = open_[round];
    if (open.from.count(site) > 0) {  // (A new generation emptied open_: nothing is stale here.)
      return Refuse(absl::AlreadyExistsError(
          absl::StrCat("site '", site, "' sent its vector of the ", RoundText(round), " already")));
    }
    if (lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
          "site '", site, "' packed ", lanes, " numbers a word; expected 1, 2, 4 or 8")));
    }
    if (!open.from.empty() && (words.size() != open.sum.size() || lanes != open.lanes)) {
      return Refuse(absl::InvalidArgumentError(absl::StrCat(
          "site '", site, "' sent ", words.size(), " words of ", lanes, " lane(s) for the ",
          RoundText(round), "; the others sent ", open.sum.size(), " of ", open.lanes)));
    }
    if (open.from.empty()) {
      open.sum = std::move(words);
      open.lanes = lanes;
    } else {
      AddLanes(open.sum, words, lanes);
    }
    open.from.insert(site);
    open.waiting.push_back(std::move(done));
    if (open.from.size() == replicas_[round.stage].size()) {
      sum = std::move(open.sum);
      answer = std::move(open.waiting);
      open_.erase(round);
      summed_.insert(round);
    }
  }
  for (Done& d : stale) d(absl::AbortedError("the federation rolled back"));
  for (Done& d : answer) d(sum);
  return absl::OkStatus();
}

void SecureSum::Abort(const std::string& site, const std::string& why) {
  std::vector<Done> aborted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = open_.begin(); it != open_.end();) {
      const std::vector<std::string>& stage = replicas_[it->first.stage];
      if (std::find(stage.begin(), stage.end(), site) == stage.end()) {
        ++it;
        continue;
      }
      for (Done& d : it->second.waiting) aborted.push_back(std::move(d));
      it = open_.erase(it);
    }
  }
  for (Done& d : aborted) {
    d(absl::AbortedError(absl::StrCat("replica '", site, "' failed: ", why)));
  }
}

std::map<std::string, uint64_t> SecureSum::Refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

}  // namespace strait::gateway
