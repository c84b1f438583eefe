// The named link profiles and the parsers behind `strait wan`'s options.
#include "harness/wan/link_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strait::harness {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

TEST(LinkProfileTest, NamedProfiles) {
  struct Expected {
    const char* name;
    double rate;
    microseconds delay;
  };
  for (const Expected& e :
       {Expected{"metro", 10e9, milliseconds(1)}, Expected{"region", 1e9, milliseconds(15)},
        Expected{"continent", 100e6, milliseconds(75)},
        Expected{"satellite", 20e6, milliseconds(300)}}) {
    absl::StatusOr<LinkProfile> p = NamedProfile(e.name);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->name, e.name);
    EXPECT_EQ(p->rate_bits_per_second, e.rate);
    EXPECT_EQ(p->one_way_delay, e.delay);
    EXPECT_EQ(p->jitter.count(), 0);
    EXPECT_EQ(p->loss_burst.duration.count(), 0);
  }
  EXPECT_THAT(ProfileNames(), ::testing::ElementsAre("metro", "region", "continent", "satellite"));
}

TEST(LinkProfileTest, UnknownProfileListsTheNames) {
  absl::StatusOr<LinkProfile> p = NamedProfile("moon");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("moon"));
  EXPECT_THAT(p.status().message(), HasSubstr("metro, region, continent, satellite"));
}

TEST(LinkProfileTest, ParseRate) {
  EXPECT_EQ(*ParseRate("100mbit"), 100e6);
  EXPECT_EQ(*ParseRate("1gbit"), 1e9);
  EXPECT_EQ(*ParseRate("10Gbit/s"), 10e9);
  EXPECT_EQ(*ParseRate("500kbit"), 500e3);
  EXPECT_EQ(*ParseRate("2.5gbit"), 2.5e9);
  EXPECT_EQ(*ParseRate("64kbps"), 64e3);
  EXPECT_EQ(*ParseRate("9600bit"), 9600);
  EXPECT_EQ(*ParseRate(" 20MBit/s "), 20e6);
  EXPECT_EQ(*ParseRate("unlimited"), 0);
  for (const char* bad : {"", "100", "mbit", "0mbit", "-5mbit", "1.2.3gbit", "100MB", "10 gbit",
                          "fast", "1e9bit", "100mbit/h"}) {
    absl::StatusOr<double> r = ParseRate(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("e.g. 500kbit")) << bad;
  }
}

TEST(LinkProfileTest, ParseDuration) {
  EXPECT_EQ(*ParseDuration("15ms"), milliseconds(15));
  EXPECT_EQ(*ParseDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(*ParseDuration("300us"), microseconds(300));
  EXPECT_EQ(*ParseDuration("0.5ms"), microseconds(500));
  EXPECT_EQ(*ParseDuration("0"), microseconds(0));
  EXPECT_EQ(*ParseDuration("0ms"), microseconds(0));
  for (const char* bad : {"", "15", "ms", "-1ms", "15 minutes", "1h", "2.5.1s", "10ns"}) {
    absl::StatusOr<microseconds> d = ParseDuration(bad);
    EXPECT_FALSE(d.ok()) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr("e.g. 300us, 15ms, 1.5s")) << bad;
  }
}

TEST(LinkProfileTest, ParseLossBurst) {
  absl::StatusOr<LossBurst> b = ParseLossBurst("10s:200ms");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->mean_interval, milliseconds(10000));
  EXPECT_EQ(b->duration, milliseconds(200));
  for (const char* bad : {"", "10s", "10s:", ":200ms", "0s:200ms", "10s:0ms", "10s:200", "a:b"}) {
    absl::StatusOr<LossBurst> r = ParseLossBurst(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("e.g. 10s:200ms")) << bad;
  }
}

TEST(LinkProfileTest, Describe) {
  EXPECT_EQ(Describe(*NamedProfile("continent")), "continent: 100 Mbit/s, 75 ms one-way");
  EXPECT_EQ(Describe(*NamedProfile("metro")), "metro: 10 Gbit/s, 1 ms one-way");
  EXPECT_EQ(Describe(*NamedProfile("satellite")), "satellite: 20 Mbit/s, 300 ms one-way");
  LinkProfile custom;
  custom.name = "custom";
  custom.rate_bits_per_second = 2.5e9;
  custom.one_way_delay = microseconds(1500);
  custom.jitter = milliseconds(5);
  custom.loss_burst = {milliseconds(10000), milliseconds(200)};
  EXPECT_EQ(Describe(custom),
            "custom: 2.5 Gbit/s, 1.5 ms one-way, jitter 5 ms, loss bursts of 200 ms every 10 s on "
            "average");
  custom = LinkProfile{};
  EXPECT_EQ(Describe(custom), "custom: unlimited rate, 0 us one-way");
}

}  // namespace
}  // namespace strait::harness
