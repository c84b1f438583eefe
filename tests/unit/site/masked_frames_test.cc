// What the gateway holds of one replica (DESIGN.md §5), tested on the frames ReplicaMeans pushes to
// it, in every round format (32-bit fixed point, 16- and 8-bit lanes, 4-bit lanes of a fragment):
// the bytes of the masked words are uniform (Pearson's chi-squared over 256 byte values) and the
// same for an all-zero vector as for one at the edge of the range (a chi-squared test of
// homogeneity). Each threshold is the p = 1e-6 critical value, so the test fails by chance once in
// a million runs; the same bytes without masks fail it (the check can fail).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/job_spec.h"
#include "crypto/pairwise_masks.h"
#include "site/pipeline/replica_means.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/weight_history.h"
#include "tests/unit/site/fake_gateway.h"

namespace strait::site {
namespace {

constexpr char kJob[] = R"(name: masked-frames
model: {family: mlp, input: 4, hidden: [4], classes: 2}
data: {dataset: synthetic, seed: 5, train_size: 64, test_size: 16}
training: {steps: 4, global_batch: 8, microbatches: 2, sync: outer}
sites:
  - {id: a, layers: [0, 2]}
replicas:
  - [a]
  - [b]
)";

// The critical value of chi-squared with `df` degrees of freedom at p = 1e-6 (Wilson-Hilferty).
double Critical(int df) {
  const double z = 4.753424;  // The standard normal's 1 - 1e-6 quantile.
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

using Histogram = std::array<double, 256>;

Histogram BytesOf(const std::vector<uint32_t>& words) {
  Histogram h{};
  for (uint32_t w : words) {
    for (int b = 0; b < 4; ++b) h[(w >> (8 * b)) & 0xff] += 1;
  }
  return h;
}

double Uniformity(const Histogram& h) {
  double n = 0, chi = 0;
  for (double c : h) n += c;
  for (double c : h) chi += (c - n / 256) * (c - n / 256) / (n / 256);
  return chi;
}

double Homogeneity(const Histogram& x, const Histogram& y) {
  double nx = 0, ny = 0, chi = 0;
  for (int i = 0; i < 256; ++i) nx += x[i], ny += y[i];
  for (int i = 0; i < 256; ++i) {
    const double total = x[i] + y[i];
    if (total == 0) continue;
    const double ex = total * nx / (nx + ny), ey = total * ny / (nx + ny);
    chi += (x[i] - ex) * (x[i] - ex) / ex + (y[i] - ey) * (y[i] - ey) / ey;
  }
  return chi;
}

struct Pair {
  crypto::LinkEnd end;
  crypto::EphemeralKey key;
};

class MaskedFramesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(kJob, "masked-frames.yaml", "/");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    stage_ =
        *StageExecutor::Create(spec_.model, spec_.sites[0].layers, spec_.training.optimizer,
                               spec_.training.MicrobatchSize(), VersioningOf(spec_.training), {});
    for (const char* id : {"a", "b"}) {
      crypto::EphemeralKey key = *crypto::EphemeralKey::Generate();
      crypto::LinkEnd end{.site_id = id, .epoch = 1, .public_key = key.public_key()};
      replicas_.push_back({end, std::move(key)});
    }
    gateway_.on_push = [this](ReceivedFrame& frame) {
      if (frame.header.key().purpose() == v1::SUM) pushed_.push_back(frame);
    };
  }

  // The words of replica a's vector of `values` in `format` as the gateway receives them.
  std::vector<uint32_t> Received(const std::vector<float>& values, const SumFormat& format,
                                 bool masked = true) {
    StageLinks links;
    links.sum_out = *FrameSender::Create(link_, *FrameEncoder::Create("none", nullptr), 0,
                                         v1::FORWARD, metrics_, 2);
    links.sum_in =
        *FrameReceiver::Create(link_, std::make_unique<FrameDecoder>(nullptr, uint64_t{1} << 30),
                               {"sum", 0, v1::BACKWARD}, metrics_, 2);
    links.mask = [this, masked](absl::string_view round, std::span<uint32_t> words) {
      if (!masked) return absl::OkStatus();
      const std::vector<crypto::LinkEnd> peers = {replicas_[1].end};
      return crypto::AddPairwiseMasks("fed", round, replicas_[0].end, replicas_[0].key, peers,
                                      words);
    };
    StageFrames frames(spec_, 0, 0, 0, std::move(links), metrics_);
    ReplicaMeans means(frames, *stage_);
    pushed_.clear();
    EXPECT_TRUE(means.Start("outer", ++round_, values, format).ok());
    EXPECT_TRUE(frames.Flush().ok());
    EXPECT_EQ(pushed_.size(), 1u);
    if (pushed_.empty()) return {};
    const ReceivedFrame& frame = pushed_.back();
    EXPECT_EQ(frame.header.codec_chain(), "none");
    EXPECT_EQ(frame.header.key().microbatch(), static_cast<uint32_t>(format.lanes()));
    const size_t words = frame.header.raw_bytes() / 4;
    EXPECT_EQ(words, MaskedCount(values.size(), format.bits) / format.lanes());
    std::vector<uint32_t> out(words);
    // The codec `none` puts its header first; the words are the body's last 4 * words bytes.
    std::memcpy(out.data(), frame.body.data() + frame.body.size() - 4 * words, 4 * words);
    return out;
  }

  JobSpec spec_;
  std::unique_ptr<StageExecutor> stage_;
  std::vector<Pair> replicas_;
  FakeGateway gateway_;
  FakeGateway::Link link_{gateway_, "a"};
  SiteMetrics metrics_;
  std::vector<ReceivedFrame> pushed_;
  int64_t round_ = 0;
};

TEST_F(MaskedFramesTest, TheGatewaySeesUniformBytesInEveryFormat) {
  const size_t n = 1 << 18;  // 2^17 bytes of 4-bit lanes, more of the wider ones.
  std::vector<float> last_mean(n);
  for (size_t i = 0; i < n; ++i) last_mean[i] = 0.01f * std::sin(0.1 * i);
  const double critical = Critical(255);
  for (int bits : {32, 16, 8, 4}) {
    const SumFormat format =
        bits == 32 ? FixedPointSumFormat(20, 2) : OuterSumFormat(bits, 20, 2, last_mean);
    // The edge of the range: every value quantises to +bound (or clamps there).
    std::vector<float> large(n);
    for (size_t i = 0; i < n; ++i) large[i] = static_cast<float>(format.bound() * format.step(i));
    const Histogram zero = BytesOf(Received(std::vector<float>(n, 0.0f), format));
    const Histogram edge = BytesOf(Received(large, format));
    EXPECT_LT(Uniformity(zero), critical) << bits << " bits, all zero";
    EXPECT_LT(Uniformity(edge), critical) << bits << " bits, large";
    EXPECT_LT(Homogeneity(zero, edge), critical) << bits << " bits, zero against large";
    // Without masks the same frames are anything but uniform.
    EXPECT_GT(Uniformity(BytesOf(Received(large, format, /*masked=*/false))), 100 * critical);
  }
}

}  // namespace
}  // namespace strait::site
