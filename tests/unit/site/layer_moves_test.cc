// Layers that change owner at a rollback (site/daemon/layer_moves.h), three sites in one process
// through an in-process gateway: every site ends with exactly its new layers' checkpoint, a site
// whose layers stay keeps its file, and a second re-plan at the same step (the rollback repeated)
// starts again from the checkpoints the sites trained.
#include "site/daemon/layer_moves.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "core/model_layout.h"
#include "harness/subprocess.h"
#include "site/backend/counter_rng.h"
#include "site/nn/checkpoint_layers.h"
#include "site/nn/stage.h"
#include "tests/unit/core/mem_env.h"
#include "tests/unit/site/fake_gateway.h"

namespace strait::site {
namespace {

class LayerMovesTest : public ::testing::Test {
 protected:
  LayerMovesTest() {
    spec_.name = "moves";
    spec_.model.family = ModelFamily::kMlp;
    spec_.model.mlp.input = 6;
    spec_.model.mlp.hidden = {8, 8, 8, 8};
    spec_.model.mlp.classes = 3;  // 5 layers
    spec_.training.optimizer.kind = OptimizerKind::kAdamW;
    spec_.training.checkpoint.dir = dir_.path();
    spec_.sites = {{.id = "dc-a"}, {.id = "dc-b"}, {.id = "dc-c"}};
    spec_.links.resize(2);
    for (LinkSpec& l : spec_.links) l.encryption = false;
    for (SiteSpec& site : spec_.sites) site.plan_layers = true;  // layers: auto, planned.
    // The whole model's checkpoint of step 10, every float distinct.
    int64_t n = 0;
    for (const LayerLayout& l : BuildModelLayout(spec_.model)) n += l.param_count;
    whole_.step = 10;
    whole_.optimizer_kind = static_cast<uint32_t>(OptimizerKind::kAdamW);
    whole_.end_layer = 5;
    whole_.fingerprint = StageFingerprint(spec_.model, {0, 5});
    for (int64_t i = 0; i < n; ++i) whole_.params.push_back(CounterUniform(1, i));
    for (int64_t i = 0; i < 2 * n; ++i) whole_.optimizer_state.push_back(CounterUniform(2, i));
  }

  std::string Path(int site) const {
    return CheckpointStore(spec_, spec_.sites[site].id, *env_).PathFor(10);
  }

  // Each site's checkpoint of step 10 as trained under `split`.
  void Train(const std::vector<LayerRange>& split) {
    for (int s = 0; s < 3; ++s) {
      ASSERT_TRUE(WriteCheckpoint(Path(s), *CutLayers(whole_, spec_.model, split[s]), env_).ok());
    }
  }

  // Sites `sites` move their layers for `split` at once; their statuses.
  std::vector<absl::Status> Move(const std::vector<LayerRange>& split, uint32_t generation,
                                 std::vector<int> sites = {0, 1, 2}) {
    const JobView planned{.split = split, .planned = true};
    std::vector<absl::Status> results(3);
    std::vector<std::unique_ptr<FakeGateway::Link>> links;
    for (int s = 0; s < 3; ++s) links.push_back(std::make_unique<FakeGateway::Link>(gateway_));
    std::vector<std::thread> threads;
    const std::map<std::string, v1::SignedKey> no_keys;
    for (int s : sites) {
      threads.emplace_back([&, s] {
        results[s] = MoveLayers({.spec = &spec_,
                                 .view = &planned,
                                 .index = s,
                                 .step = 10,
                                 .generation = generation,
                                 .link = links[s].get(),
                                 .keys = &no_keys},
                                CheckpointStore(spec_, spec_.sites[s].id, *env_));
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  }

  void ExpectHolds(int site, LayerRange layers) {
    absl::StatusOr<CheckpointState> got = ReadCheckpoint(Path(site), env_);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*SerializeCheckpoint(*got),
              *SerializeCheckpoint(*CutLayers(whole_, spec_.model, layers)))
        << spec_.sites[site].id;
  }

  harness::TempDir dir_;
  Env* env_ = Env::Default();  // The in-memory tests below set their own.
  JobSpec spec_;
  CheckpointState whole_;
  FakeGateway gateway_;
};

TEST_F(LayerMovesTest, EverySiteEndsWithItsNewLayers) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  for (const absl::Status& s : Move({{0, 1}, {1, 3}, {3, 5}}, 2)) ASSERT_TRUE(s.ok()) << s;
  ExpectHolds(0, {0, 1});
  ExpectHolds(1, {1, 3});
  ExpectHolds(2, {3, 5});
  EXPECT_TRUE(std::filesystem::exists(Path(0) + ".moved"));
  EXPECT_TRUE(std::filesystem::exists(Path(1) + ".moved"));
  EXPECT_FALSE(std::filesystem::exists(Path(2) + ".moved"));  // Its layers stayed.
  EXPECT_EQ(gateway_.stored(), 0u);                           // Every part was taken.

  // The rollback repeats with another split: the moves start again from the trained files.
  for (const absl::Status& s : Move({{0, 3}, {3, 4}, {4, 5}}, 3)) ASSERT_TRUE(s.ok()) << s;
  ExpectHolds(0, {0, 3});
  ExpectHolds(1, {3, 4});
  ExpectHolds(2, {4, 5});
  ASSERT_TRUE(ReadCheckpoint(Path(0) + ".moved").ok());
  EXPECT_EQ(ReadCheckpoint(Path(0) + ".moved")->end_layer, 2);  // Still what dc-a trained.
}

// A site without its checkpoint of the step fails before it sends anything (its process exits; the
// others' wait ends with the generation).
TEST_F(LayerMovesTest, ASiteWithoutItsCheckpointFailsAndSaysWhich) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  std::filesystem::remove(Path(1));  // dc-b lost its checkpoint.
  const std::vector<absl::Status> results = Move({{0, 1}, {1, 3}, {3, 5}}, 2, {1});
  EXPECT_FALSE(results[1].ok());
  EXPECT_NE(results[1].message().find("step-00000010.ckpt"), std::string::npos) << results[1];
}

// A gateway link on which no part ever arrives.
class NothingArrives : public GatewayLink {
 public:
  std::future<absl::Status> Push(v1::FrameHeader, std::string) override {
    std::promise<absl::Status> done;
    done.set_value(absl::OkStatus());
    return done.get_future();
  }
  std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey&,
                                                  std::chrono::milliseconds) override {
    ++pulls;
    std::promise<absl::StatusOr<ReceivedFrame>> none;
    none.set_value(absl::DeadlineExceededError("no frame"));
    return none.get_future();
  }
  void Ack(const v1::TensorKey&) override {}
  void Report(const v1::SiteReport&) override {}
  void OnControl(std::function<void(const v1::Control&)>) override {}
  int pulls = 0;
};

// A Pause while a part is awaited ends the wait: the session waits for the next Rollback.
TEST_F(LayerMovesTest, TheEndOfTheGenerationEndsTheWait) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  const JobView planned{.split = {{0, 1}, {1, 3}, {}}, .planned = true};
  NothingArrives link;
  const std::map<std::string, v1::SignedKey> no_keys;
  const absl::Status s = MoveLayers({.spec = &spec_,
                                     .view = &planned,
                                     .index = 0,
                                     .step = 10,
                                     .generation = 2,
                                     .link = &link,
                                     .keys = &no_keys,
                                     .interrupted = [&link] { return link.pulls >= 3; }},
                                    CheckpointStore(spec_, "dc-a", *Env::Default()));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_EQ(link.pulls, 3);
  EXPECT_FALSE(std::filesystem::exists(Path(0) + ".moved"));  // Nothing was rewritten.
}

// The same moves on an in-memory Env (tests/unit/core/mem_env.h): no disk, and the wait for a part
// on a clock that moves only when told.
class LayerMovesInMemoryTest : public LayerMovesTest {
 protected:
  LayerMovesInMemoryTest() {
    env_ = &mem_;
    spec_.training.checkpoint.dir = "/ckpt";
  }
  testing::MemEnv mem_;
};

TEST_F(LayerMovesInMemoryTest, EverySiteEndsWithItsNewLayers) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  for (const absl::Status& s : Move({{0, 1}, {1, 3}, {3, 5}}, 2)) ASSERT_TRUE(s.ok()) << s;
  ExpectHolds(0, {0, 1});
  ExpectHolds(1, {1, 3});
  ExpectHolds(2, {3, 5});
  EXPECT_TRUE(mem_.FileExists(Path(0) + ".moved"));
  EXPECT_TRUE(mem_.FileExists(Path(1) + ".moved"));
  EXPECT_FALSE(mem_.FileExists(Path(2) + ".moved"));  // Its layers stayed.
  EXPECT_EQ(gateway_.stored(), 0u);
  EXPECT_EQ(mem_.Now(), Env::Clock::time_point{});  // Nothing waited on the clock.
}

// dc-a's disk fills after it kept its trained checkpoint as .moved: its move fails naming the file,
// the trained checkpoint stays readable, and the rollback repeated once there is room completes
// from it (the other sites' parts come again from their trained files).
TEST_F(LayerMovesInMemoryTest, AFailedWriteLeavesTheTrainedCheckpointAndTheRepeatCompletes) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  const std::string trained = *mem_.ReadFile(Path(0));
  mem_.FailWritesUnder(Path(0));
  std::vector<absl::Status> results = Move({{0, 1}, {1, 3}, {3, 5}}, 2);
  EXPECT_EQ(results[0].code(), absl::StatusCode::kInternal) << results[0];
  EXPECT_NE(results[0].message().find("step-00000010.ckpt"), std::string::npos) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_TRUE(results[2].ok()) << results[2];
  EXPECT_EQ(*mem_.ReadFile(Path(0) + ".moved"), trained);
  EXPECT_EQ(TrainedCheckpointPath(CheckpointStore(spec_, "dc-a", mem_), 10), Path(0) + ".moved");
  ASSERT_TRUE(ReadCheckpoint(Path(0) + ".moved", &mem_).ok());

  mem_.FailWritesUnder("");
  for (const absl::Status& s : Move({{0, 1}, {1, 3}, {3, 5}}, 3)) ASSERT_TRUE(s.ok()) << s;
  ExpectHolds(0, {0, 1});
  ExpectHolds(1, {1, 3});
  ExpectHolds(2, {3, 5});
  EXPECT_EQ(*mem_.ReadFile(Path(0) + ".moved"), trained);  // Still what dc-a trained.
}

// A part that never comes: the wait ends after the move's timeout on the Env's clock (each pull of
// the link takes its second), naming the site, and no file changes.
TEST_F(LayerMovesInMemoryTest, APartThatNeverComesTimesOutOnTheEnvClock) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  const JobView planned{.split = {{0, 1}, {1, 3}, {}}, .planned = true};
  class SlowNothing : public NothingArrives {
   public:
    explicit SlowNothing(testing::MemEnv& env) : env_(env) {}
    std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key,
                                                    std::chrono::milliseconds wait) override {
      env_.Advance(wait);
      return NothingArrives::Pull(key, wait);
    }
    testing::MemEnv& env_;
  } link(mem_);
  const int writes = mem_.writes();
  const std::map<std::string, v1::SignedKey> no_keys;
  const absl::Status s = MoveLayers({.spec = &spec_,
                                     .view = &planned,
                                     .index = 0,
                                     .step = 10,
                                     .generation = 2,
                                     .link = &link,
                                     .keys = &no_keys,
                                     .timeout = std::chrono::seconds(10)},
                                    CheckpointStore(spec_, "dc-a", mem_));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("no part from site dc-b"), std::string::npos) << s;
  EXPECT_EQ(link.pulls, 10);
  EXPECT_EQ(mem_.Now() - Env::Clock::time_point{}, std::chrono::seconds(10));
  EXPECT_EQ(mem_.writes(), writes);
  EXPECT_FALSE(mem_.FileExists(Path(0) + ".moved"));
}

// A part whose floats are not a range of the model's layers is refused, naming the site.
TEST_F(LayerMovesInMemoryTest, AMalformedPartIsRefusedNamingItsSite) {
  Train({{0, 2}, {2, 3}, {3, 5}});
  const std::vector<std::string> trained = {*mem_.ReadFile(Path(0)), "", *mem_.ReadFile(Path(2))};
  gateway_.on_push = [](ReceivedFrame& frame) {
    if (frame.header.key().boundary() == 1) frame.body.resize(frame.body.size() / 2);
  };
  const std::vector<absl::Status> results = Move({{0, 1}, {1, 3}, {3, 5}}, 2);
  for (int site : {0, 2}) {
    EXPECT_EQ(results[site].code(), absl::StatusCode::kInvalidArgument) << results[site];
    EXPECT_NE(results[site].message().find("the part from site dc-b is refused"), std::string::npos)
        << results[site];
    EXPECT_EQ(*mem_.ReadFile(Path(site)), trained[site]);  // Nothing was rewritten.
  }
}

}  // namespace
}  // namespace strait::site
