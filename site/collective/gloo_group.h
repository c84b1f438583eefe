// The ranks of one multi-machine site as a Gloo group (DESIGN.md §4): Gloo's TCP transport, its
// rendezvous through the site's RendezvousStore, and the one collective Strait needs across ranks,
// a float sum in place. Gloo reports errors with exceptions; this file is where they become Status.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "site/collective/rendezvous_store.h"

namespace gloo {
class Context;
}

namespace strait::site {

struct GlooGroupOptions {
  int rank = 0;  // 0 .. size - 1; rank 0 is the site's leader.
  int size = 1;
  // Namespaces this group's keys in the store: every (re)formation of a site's group uses a new
  // one.
  std::string prefix;
  // The address this rank's Gloo connections bind to (an interface of the datacenter network, or
  // 127.0.0.1 on one machine); Gloo listens on an ephemeral port of it.
  std::string host = "127.0.0.1";
  // Rendezvous and every collective fail (DeadlineExceeded / Unavailable) past this: a rank that
  // died or hangs fails the site, never blocks it forever.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
};

class GlooGroup {
 public:
  // Connects this rank to every other rank of the group (a full mesh), blocking until all have
  // called Connect with the same prefix and size, or the timeout. `store` is used only here.
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Connect(RendezvousStore& store,
                                                            const GlooGroupOptions& options);
  // Every rank of a group of `size` in this process (tests, benchmarks): connected concurrently
  // over loopback through a store of their own.
  static absl::StatusOr<std::vector<std::unique_ptr<GlooGroup>>> ConnectInProcess(int size);
  ~GlooGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // data[0, count) becomes, on every rank, the element-wise sum of every rank's data. Every rank
  // calls it with the same count and tag, in the same order. One caller at a time. With two
  // ranks each element is one addition (a + b = b + a in IEEE-754), so every rank ends with
  // the same bits as a process that sums the two itself.
  absl::Status AllReduceSum(float* data, int64_t count, uint32_t tag);

 private:
  GlooGroup(std::shared_ptr<gloo::Context> context, int rank, int size,
            std::chrono::milliseconds timeout);

  std::shared_ptr<gloo::Context> context_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace strait::site
