// The history sampler's ring buffers: bounds, rates from counter growth, `since` filtering.
#include "gateway/http/history.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/unit/gateway_http/fake_federation.h"

namespace strait::gateway {
namespace {

using nlohmann::json;

v1::FederationState OneLink(uint64_t raw, uint64_t wire) {
  v1::FederationState state;
  v1::LinkMetrics& link = *state.add_links();
  link.set_boundary(0);
  link.set_direction(v1::FORWARD);
  link.set_raw_bytes(raw);
  link.set_wire_bytes(wire);
  return state;
}

TEST(History, KeepsTheNewestPointsUpToCapacity) {
  History history(4);
  for (int i = 0; i < 10; ++i) history.Add(testing::FakeFederationState(i), 1000 + i);
  json j = json::parse(history.ToJson(0));
  EXPECT_EQ(j["capacity"], 4);
  ASSERT_EQ(j["sites"].size(), 3u);
  EXPECT_EQ(j["sites"]["dc-a"]["t"], json({1006, 1007, 1008, 1009}));
  EXPECT_EQ(j["sites"]["dc-a"]["step"], json({24, 28, 32, 36}));
  // Every series has one value per timestamp.
  for (const char* key : {"step", "loss", "samples_per_second", "compute_s", "wait_s", "encode_s",
                          "decode_s", "seal_s", "open_s"}) {
    EXPECT_EQ(j["sites"]["dc-b"][key].size(), 4u) << key;
  }
  EXPECT_EQ(j["links"].size(), 4u);
  EXPECT_EQ(j["links"]["1/backward"]["t"].size(), 4u);
  EXPECT_EQ(j["links"]["1/backward"]["boundary"], 1);
  EXPECT_EQ(j["links"]["1/backward"]["direction"], "backward");
}

TEST(History, LossIsNullWhereASiteReportsNone) {
  History history(10);
  v1::FederationState state = testing::FakeFederationState(10);
  history.Add(state, 5);
  json j = json::parse(history.ToJson(0));
  EXPECT_TRUE(j["sites"]["dc-a"]["loss"][0].is_null());
  EXPECT_DOUBLE_EQ(j["sites"]["dc-c"]["loss"][0].get<double>(),
                   state.sites(2).last_report().loss());
  EXPECT_DOUBLE_EQ(j["sites"]["dc-b"]["compute_s"][0].get<double>(),
                   state.sites(1).last_report().compute_s());
}

TEST(History, LinkRatesComeFromCounterGrowth) {
  History history(10);
  history.Add(OneLink(1000, 500), 10'000);   // Baseline only.
  history.Add(OneLink(3000, 1000), 12'000);  // +2000 raw, +500 wire in 2 s.
  history.Add(OneLink(400, 100), 13'000);    // Counters went down (restart): count from zero.
  json link = json::parse(history.ToJson(0))["links"]["0/forward"];
  EXPECT_EQ(link["t"], json({12'000, 13'000}));
  EXPECT_EQ(link["raw_bytes_per_s"], json({1000.0, 400.0}));
  EXPECT_EQ(link["wire_bytes_per_s"], json({250.0, 100.0}));
}

TEST(History, ReplicasLinksHaveSeriesOfTheirOwn) {
  v1::FederationState state = OneLink(1000, 500);
  *state.add_links() = state.links(0);
  state.mutable_links(1)->set_replica(1);
  History history(10);
  history.Add(state, 1'000);
  state.mutable_links(1)->set_raw_bytes(5000);
  history.Add(state, 2'000);
  json links = json::parse(history.ToJson(0))["links"];
  EXPECT_EQ(links["0/forward"]["raw_bytes_per_s"], json({0.0}));
  EXPECT_EQ(links["0/forward@1"]["raw_bytes_per_s"], json({4000.0}));
  EXPECT_EQ(links["0/forward@1"]["replica"], 1);
}

TEST(History, SinceReturnsOnlyNewerPoints) {
  History history(100);
  for (int i = 0; i < 5; ++i) history.Add(testing::FakeFederationState(i), 100 * (i + 1));
  json j = json::parse(history.ToJson(300));
  EXPECT_EQ(j["sites"]["dc-c"]["t"], json({400, 500}));
  EXPECT_EQ(j["links"]["0/forward"]["t"], json({400, 500}));
  json none = json::parse(history.ToJson(500));
  EXPECT_TRUE(none["sites"]["dc-c"]["t"].empty());
}

TEST(History, DropsSeriesOfSitesAndLinksThatDisappear) {
  History history(10);
  history.Add(testing::FakeFederationState(1), 1);
  v1::FederationState fewer = testing::FakeFederationState(2);
  fewer.mutable_sites()->RemoveLast();
  fewer.mutable_links()->RemoveLast();
  history.Add(fewer, 2);
  json j = json::parse(history.ToJson(0));
  EXPECT_EQ(j["sites"].size(), 2u);
  EXPECT_FALSE(j["sites"].contains("dc-c"));
  EXPECT_EQ(j["links"].size(), 3u);
}

TEST(History, InvalidUtf8InASiteIdStillGivesValidJson) {
  History history(2);
  v1::FederationState state;
  state.add_sites()->set_site_id(std::string("bad\xff\xfe", 5));
  history.Add(state, 1);
  EXPECT_NO_THROW(json::parse(history.ToJson(0)));
}

}  // namespace
}  // namespace strait::gateway
