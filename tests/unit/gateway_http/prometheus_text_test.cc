// /metrics text: parsed back by a strict reader of the 0.0.4 text format, values checked against
// the snapshot, and label values with quotes, backslashes and line feeds round-tripped; linted by
// `promtool check metrics` where promtool is installed (Debian package prometheus).
#include "gateway/http/prometheus_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/gateway_http/fake_federation.h"

namespace strait::gateway {
namespace {

using ::testing::Pair;

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value;
};

struct Exposition {
  std::map<std::string, std::string> types;  // Family name -> TYPE.
  std::map<std::string, std::string> helps;
  std::vector<Sample> samples;
};

bool ValidName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') return false;
  }
  return true;
}

// Parses the text format strictly: every family has HELP then TYPE before its samples, and the
// samples of a family are contiguous. Records failures as test failures.
void ParseInto(const std::string& text, Exposition& out) {
  EXPECT_TRUE(text.empty() || text.back() == '\n');
  std::istringstream lines(text);
  std::string line, current;
  std::set<std::string> finished;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(ValidName(name)) << line;
      if (line[2] == 'H') {
        EXPECT_FALSE(out.helps.contains(name)) << "second HELP for " << name;
        if (!current.empty()) finished.insert(current);
        current = name;
        out.helps[name] = rest.substr(name.size() + 1);
      } else {
        EXPECT_EQ(name, current) << "TYPE without HELP first: " << line;
        std::string type = rest.substr(name.size() + 1);
        EXPECT_TRUE(type == "counter" || type == "gauge") << line;
        out.types[name] = type;
      }
      continue;
    }
    ASSERT_FALSE(line.empty() || line[0] == '#') << "unexpected line: '" << line << "'";
    Sample sample;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    sample.name = line.substr(0, i);
    EXPECT_EQ(sample.name, current) << "sample outside its family: " << line;
    EXPECT_FALSE(finished.contains(sample.name)) << "family split: " << line;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        ASSERT_NE(eq, std::string::npos) << line;
        std::string key = line.substr(i, eq - i);
        EXPECT_TRUE(ValidName(key)) << line;
        ASSERT_EQ(line[eq + 1], '"') << line;
        std::string value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            ASSERT_LT(i, line.size()) << line;
            ASSERT_TRUE(line[i] == '\\' || line[i] == '"' || line[i] == 'n') << line;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        ASSERT_LT(i, line.size()) << "unterminated label value: " << line;
        EXPECT_FALSE(sample.labels.contains(key)) << line;
        sample.labels[key] = value;
        ++i;  // Closing quote.
        if (i < line.size() && line[i] == ',') ++i;
      }
      ASSERT_LT(i, line.size()) << line;
      ++i;  // Closing brace.
    }
    ASSERT_LT(i, line.size()) << line;
    ASSERT_EQ(line[i], ' ') << line;
    std::string value = line.substr(i + 1);
    // NaN in any case, as Prometheus reads it (prometheus-cpp writes "Nan").
    if (value.size() == 3 && std::tolower(value[0]) == 'n' && std::tolower(value[1]) == 'a' &&
        std::tolower(value[2]) == 'n') {
      sample.value = std::nan("");
    } else if (value == "+Inf" || value == "-Inf") {
      sample.value = value[0] == '+' ? INFINITY : -INFINITY;
    } else {
      size_t used = 0;
      sample.value = std::stod(value, &used);
      EXPECT_EQ(used, value.size()) << line;
    }
    out.samples.push_back(sample);
  }
}

Exposition Parse(const std::string& text) {
  Exposition out;
  ParseInto(text, out);
  return out;
}

// The value of the one sample of `name` with exactly `labels`; fails when there is none.
double Value(const Exposition& e, const std::string& name,
             const std::map<std::string, std::string>& labels) {
  for (const Sample& s : e.samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  ADD_FAILURE() << "no sample " << name;
  return std::nan("");
}

size_t Count(const Exposition& e, const std::string& name) {
  size_t n = 0;
  for (const Sample& s : e.samples) n += s.name == name ? 1 : 0;
  return n;
}

// prometheus-cpp writes 16 significant digits: a value reads back within a few ulps, not always
// exactly (0.1 + 0.2 reads back as 0.3).
TEST(PrometheusText, ValuesReadBack) {
  v1::FederationState state;
  state.mutable_view()->add_sites()->set_id("s");
  v1::SiteReport& report = *state.add_sites()->mutable_last_report();
  state.mutable_sites(0)->set_site_id("s");
  report.set_has_loss(true);
  report.set_loss(std::nan(""));
  report.set_samples_per_second(INFINITY);
  report.set_eta_s(-INFINITY);
  report.set_compute_s(1.0 / 3.0);
  report.set_wait_s(0.1);
  report.set_encode_s(-2.5);
  report.set_decode_s(1e300);
  state.set_uptime_s(0);
  state.set_stored_bytes(uint64_t{1} << 53);  // Integers up to 2^53 are exact.
  const std::string text = RenderPrometheusText(state);
  Exposition e = Parse(text);
  EXPECT_TRUE(std::isnan(Value(e, "strait_site_loss", {{"site", "s"}})));
  EXPECT_EQ(Value(e, "strait_site_samples_per_second", {{"site", "s"}}), INFINITY);
  EXPECT_EQ(Value(e, "strait_site_eta_seconds", {{"site", "s"}}), -INFINITY);
  auto phase = [&](const char* name) {
    return Value(e, "strait_site_time_seconds", {{"site", "s"}, {"phase", name}});
  };
  EXPECT_DOUBLE_EQ(phase("compute"), 1.0 / 3.0);
  EXPECT_EQ(phase("wait"), 0.1);
  EXPECT_EQ(phase("encode"), -2.5);
  EXPECT_DOUBLE_EQ(phase("decode"), 1e300);
  EXPECT_EQ(Value(e, "strait_gateway_stored_bytes", {}), double(uint64_t{1} << 53));
  // Integers print without a fraction or an exponent.
  EXPECT_NE(text.find("\nstrait_gateway_uptime_seconds 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstrait_gateway_stored_bytes 9007199254740992\n"), std::string::npos)
      << text;
}

TEST(PrometheusText, FakeFederationParsesAndMatchesTheSnapshot) {
  v1::FederationState state = testing::FakeFederationState(50.0);  // Step 200.
  Exposition e = Parse(RenderPrometheusText(state));
  ASSERT_FALSE(e.samples.empty());
  // Families in the order they are written (gateway, sites, links), not the registry's (counters
  // first).
  EXPECT_EQ(e.samples.front().name, "strait_federation_info");
  EXPECT_EQ(e.samples.back().name, "strait_link_queue_depth");
  for (const char* counter :
       {"strait_gateway_accounting_errors_total", "strait_gateway_rejected_frames_total",
        "strait_gateway_rejected_frames_by_reason_total", "strait_site_restarts_total",
        "strait_link_frames_total", "strait_link_raw_bytes_total",
        "strait_link_wire_bytes_total"}) {
    EXPECT_EQ(e.types[counter], "counter") << counter;
  }
  for (const auto& [name, type] : e.types) {
    EXPECT_TRUE(name.rfind("strait_", 0) == 0) << name;
    if (type == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
  }
  EXPECT_EQ(Value(e, "strait_site_step", {{"site", "dc-a"}}), 200);
  EXPECT_EQ(Value(e, "strait_gateway_accounting_errors_total", {}), 1);
  EXPECT_EQ(Value(e, "strait_site_state", {{"site", "dc-b"}, {"state", "training"}}), 1);
  EXPECT_EQ(Value(e, "strait_site_state", {{"site", "dc-b"}, {"state", "down"}}), 0);
  EXPECT_EQ(Count(e, "strait_site_state"), 15u);  // 3 sites x 5 states.
  EXPECT_EQ(Value(e, "strait_site_info",
                  {{"site", "dc-b"},
                   {"stage", "1"},
                   {"layer_start", "2"},
                   {"layer_end", "5"},
                   {"device", "cpu"},
                   {"workers", "8"}}),
            1);
  // Only the last stage reports a loss, and the held-out figures.
  EXPECT_EQ(Count(e, "strait_site_loss"), 1u);
  EXPECT_EQ(Count(e, "strait_site_heldout_accuracy"), 1u);
  EXPECT_DOUBLE_EQ(Value(e, "strait_site_heldout_accuracy", {{"site", "dc-c"}}),
                   state.sites(2).last_report().evaluation().accuracy());
  EXPECT_DOUBLE_EQ(Value(e, "strait_site_loss", {{"site", "dc-c"}}),
                   state.sites(2).last_report().loss());
  EXPECT_DOUBLE_EQ(Value(e, "strait_site_time_seconds", {{"site", "dc-a"}, {"phase", "compute"}}),
                   state.sites(0).last_report().compute_s());
  EXPECT_EQ(Count(e, "strait_site_time_seconds"), 18u);  // 3 sites x 6 phases.
  EXPECT_EQ(Value(e, "strait_site_restarts_total", {{"site", "dc-b"}}), 1);

  std::map<std::string, std::string> fwd0 = {
      {"boundary", "0"}, {"direction", "forward"}, {"from", "dc-a"}, {"to", "dc-b"}};
  std::map<std::string, std::string> bwd1 = {
      {"boundary", "1"}, {"direction", "backward"}, {"from", "dc-c"}, {"to", "dc-b"}};
  EXPECT_EQ(Value(e, "strait_link_frames_total", fwd0), 800);
  EXPECT_EQ(Value(e, "strait_link_raw_bytes_total", fwd0), 800.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(Value(e, "strait_link_compression_ratio", fwd0),
                   double(state.links(0).raw_bytes()) / double(state.links(0).wire_bytes()));
  EXPECT_DOUBLE_EQ(Value(e, "strait_link_push_to_pull_latency_seconds", bwd1), 0.0058);
  EXPECT_EQ(Count(e, "strait_link_queue_depth"), 4u);

  EXPECT_EQ(Value(e, "strait_gateway_rejected_frames_by_reason_total", {{"reason", "malformed"}}),
            2);
  EXPECT_EQ(Value(e, "strait_gateway_rejected_frames_total", {}), 5);
  EXPECT_EQ(Value(e, "strait_gateway_memory_budget_bytes", {}), 512.0 * 1024 * 1024);
  EXPECT_EQ(Value(e, "strait_gateway_alerts", {{"severity", "critical"}}), 1);
  EXPECT_EQ(Value(e, "strait_federation_info", {{"federation", "fashion-demo"}}), 1);
}

TEST(PrometheusText, AwkwardLabelValuesRoundTrip) {
  v1::FederationState state;
  const std::string site = "we\"ird\\site\nx";
  const std::string reason = "bad \"chunk\" \\ count";
  v1::SiteInfo& info = *state.mutable_view()->add_sites();
  info.set_id(site);
  info.set_step(7);
  state.add_sites()->set_site_id(site);
  (*state.mutable_rejected_by_reason())[reason] = 3;
  state.mutable_view()->set_federation("line1\nline2");
  const std::string text = RenderPrometheusText(state);
  EXPECT_NE(text.find("\nstrait_site_step{site=\"we\\\"ird\\\\site\\nx\"} 7\n"), std::string::npos)
      << text;
  Exposition e = Parse(text);
  EXPECT_EQ(Value(e, "strait_site_step", {{"site", site}}), 7);
  EXPECT_EQ(Value(e, "strait_gateway_rejected_frames_by_reason_total", {{"reason", reason}}), 3);
  EXPECT_EQ(Value(e, "strait_federation_info", {{"federation", "line1\nline2"}}), 1);
}

TEST(PrometheusText, LinkWithoutWireBytesHasNoRatioAndUnknownSitesAreEmpty) {
  v1::FederationState state;
  v1::LinkMetrics& link = *state.add_links();
  link.set_boundary(3);  // No sites in the view: the from/to labels are empty.
  link.set_direction(v1::BACKWARD);
  Exposition e = Parse(RenderPrometheusText(state));
  EXPECT_EQ(Count(e, "strait_link_compression_ratio"), 0u);
  EXPECT_EQ(Value(e, "strait_link_frames_total",
                  {{"boundary", "3"}, {"direction", "backward"}, {"from", ""}, {"to", ""}}),
            0);
}

TEST(PrometheusText, ReplicasLinksNameTheirPipelineAndItsSites) {
  // Two pipelines of two stages: sites[r * 2 + s] runs stage s of replica r.
  v1::FederationState state;
  state.mutable_view()->set_replicas(2);
  for (const char* id : {"a", "b", "c", "d"}) state.mutable_view()->add_sites()->set_id(id);
  for (uint32_t replica : {0u, 1u}) {
    v1::LinkMetrics& link = *state.add_links();
    link.set_replica(replica);
    link.set_boundary(0);
    link.set_direction(v1::FORWARD);
    link.set_frames(10 + replica);
  }
  Exposition e = Parse(RenderPrometheusText(state));
  EXPECT_EQ(Value(e, "strait_link_frames_total",
                  {{"boundary", "0"},
                   {"direction", "forward"},
                   {"from", "a"},
                   {"to", "b"},
                   {"replica", "0"}}),
            10);
  EXPECT_EQ(Value(e, "strait_link_frames_total",
                  {{"boundary", "0"},
                   {"direction", "forward"},
                   {"from", "c"},
                   {"to", "d"},
                   {"replica", "1"}}),
            11);
}

TEST(PrometheusText, TeacherLinksNameTheTeachersSitesAndTheStudentsLast) {
  // Student a -> b, teacher t0 -> t1 -> b (its targets), and b's pace back to t0.
  v1::FederationState state;
  for (const char* id : {"a", "b"}) state.mutable_view()->add_sites()->set_id(id);
  for (const char* id : {"t0", "t1"}) {
    v1::SiteInfo& site = *state.mutable_view()->add_sites();
    site.set_id(id);
    site.set_teacher(true);
  }
  auto add = [&](uint32_t boundary, v1::Direction direction, bool teacher, uint64_t frames) {
    v1::LinkMetrics& link = *state.add_links();
    link.set_boundary(boundary);
    link.set_direction(direction);
    link.set_teacher(teacher);
    link.set_frames(frames);
  };
  add(0, v1::FORWARD, false, 5);
  add(0, v1::FORWARD, true, 6);
  add(1, v1::FORWARD, true, 7);
  add(0, v1::BACKWARD, true, 8);
  Exposition e = Parse(RenderPrometheusText(state));
  auto frames = [&](const char* boundary, const char* direction, const char* from, const char* to,
                    bool teacher) {
    std::map<std::string, std::string> labels = {
        {"boundary", boundary}, {"direction", direction}, {"from", from}, {"to", to}};
    if (teacher) labels["teacher"] = "true";
    return Value(e, "strait_link_frames_total", labels);
  };
  EXPECT_EQ(frames("0", "forward", "a", "b", false), 5);
  EXPECT_EQ(frames("0", "forward", "t0", "t1", true), 6);
  EXPECT_EQ(frames("1", "forward", "t1", "b", true), 7);
  EXPECT_EQ(frames("0", "backward", "b", "t0", true), 8);
}

TEST(PrometheusText, EmptyStateIsValid) {
  Exposition e = Parse(RenderPrometheusText({}));
  EXPECT_THAT(e.types, ::testing::Contains(Pair("strait_gateway_uptime_seconds", "gauge")));
  EXPECT_EQ(Count(e, "strait_site_step"), 0u);
  // A family without samples is left out, its HELP and TYPE too (prometheus-cpp).
  EXPECT_FALSE(e.types.contains("strait_site_step"));
}

// `promtool check metrics` (Prometheus's own parser and linter: naming, units, _total suffixes,
// HELP) must pass without a word. promtool comes with the Debian package prometheus, which
// scripts/packages.txt leaves out: the whole server, about 330 MB installed with its dependencies
// (22.5 MB to download), for one lint. Without promtool on PATH this test skips. To run it:
// apt-get install --no-install-recommends prometheus.
TEST(PrometheusText, PromtoolFindsNothingToSay) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not found (Debian package prometheus): not linted";
  }
  v1::FederationState awkward = testing::FakeFederationState(50.0);
  awkward.mutable_view()->set_federation("we\"ird\\fed\nx");
  awkward.mutable_sites(2)->mutable_last_report()->set_loss(std::nan(""));
  awkward.mutable_view()->set_has_common_checkpoint(true);
  awkward.mutable_view()->set_common_checkpoint_step(100);
  const std::string dir = ::testing::TempDir();
  int n = 0;
  for (const v1::FederationState& state :
       {v1::FederationState(), testing::FakeFederationState(50.0), awkward}) {
    const std::string path = dir + "/prometheus_text_" + std::to_string(n++);
    std::ofstream(path + ".prom") << RenderPrometheusText(state);
    const std::string command =
        "promtool check metrics < " + path + ".prom > " + path + ".out 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream out(path + ".out");
    const std::string said((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "state " << n - 1 << ": " << command << " exited " << status << ": " << said;
    EXPECT_EQ(said, "") << "state " << n - 1;
    std::remove((path + ".prom").c_str());
    std::remove((path + ".out").c_str());
  }
}

}  // namespace
}  // namespace strait::gateway
