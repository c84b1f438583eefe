#include "site/collective/gloo_group.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <exception>
#include <future>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strait::site {
namespace {

// Gloo's Store on top of ours, under a prefix. Gloo expects exceptions from a store.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(RendezvousStore& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_.Set(prefix_ + key, std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = store_.Get(prefix_ + key, timeout_);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) Check(store_.Get(prefix_ + key, timeout).status());
  }

 private:
  static void Check(const absl::Status& s) {
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  RendezvousStore& store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

GlooGroup::GlooGroup(std::shared_ptr<gloo::Context> context, int rank, int size,
                     std::chrono::milliseconds timeout)
    : context_(std::move(context)), rank_(rank), size_(size), timeout_(timeout) {}

GlooGroup::~GlooGroup() = default;

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Connect(RendezvousStore& store,
                                                              const GlooGroupOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo group rank ", o.rank, " of ", o.size, ": out of range"));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(o.timeout);
    StoreAdapter adapter(store, o.prefix, o.timeout);
    context->connectFullMesh(adapter, device);
    return std::unique_ptr<GlooGroup>(new GlooGroup(std::move(context), o.rank, o.size, o.timeout));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("Gloo rendezvous of rank ", o.rank, " of ", o.size,
                                               " on ", o.host, " failed: ", e.what()));
  }
}

absl::StatusOr<std::vector<std::unique_ptr<GlooGroup>>> GlooGroup::ConnectInProcess(int size) {
  MemoryRendezvousStore store;
  std::vector<std::future<absl::StatusOr<std::unique_ptr<GlooGroup>>>> pending;
  for (int r = 0; r < size; ++r) {
    pending.push_back(std::async(std::launch::async, [&store, r, size] {
      return Connect(store, {.rank = r, .size = size, .prefix = "local/"});
    }));
  }
  std::vector<std::unique_ptr<GlooGroup>> groups;
  absl::Status status;
  for (auto& p : pending) {
    absl::StatusOr<std::unique_ptr<GlooGroup>> g = p.get();  // Every future, also after an error.
    status.Update(g.status());
    if (g.ok()) groups.push_back(*std::move(g));
  }
  if (!status.ok()) return status;
  return groups;
}

absl::Status GlooGroup::AllReduceSum(float* data, int64_t count, uint32_t tag) {
  if (size_ == 1 || count == 0) return absl::OkStatus();
  try {
    gloo::AllreduceOptions options(context_);
    options.setOutput(data, static_cast<size_t>(count));
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    options.setTag(tag);
    options.setTimeout(timeout_);
    gloo::allreduce(options);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("all-reduce across the site's ", size_,
                                               " ranks failed on rank ", rank_, ": ", e.what()));
  }
}

}  // namespace strait::site
