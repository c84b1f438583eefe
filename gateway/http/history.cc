#include "gateway/http/history.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "gateway/http/proto_names.h"

namespace strait::gateway {
namespace {

// "0/forward"; with replicas, pipeline r's "0/forward@r" (r > 0).
std::string LinkKey(const v1::LinkMetrics& link) {
  std::string key = (link.teacher() ? "t" : "") + std::to_string(link.boundary()) + "/" +
                    std::string(DirectionName(link.direction()));
  if (link.replica() > 0) key += "@" + std::to_string(link.replica());
  return key;
}

// Points of `points` stamped after `since`: they are in time order, so a binary search finds them.
template <typename T>
auto NewerThan(const std::deque<T>& points, uint64_t since) {
  return std::upper_bound(points.begin(), points.end(), since,
                          [](uint64_t t, const T& p) { return t < p.unix_ms; });
}

}  // namespace

History::History(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

template <typename T>
void History::Push(std::deque<T>& points, const T& point) const {
  points.push_back(point);
  while (points.size() > capacity_) points.pop_front();
}

void History::Add(const v1::FederationState& state, uint64_t unix_ms) {
  std::set<std::string> seen;
  for (const v1::SiteMetrics& m : state.sites()) {
    const v1::SiteReport& r = m.last_report();
    seen.insert(m.site_id());
    Push(sites_[m.site_id()],
         SitePoint{unix_ms, r.step(), r.has_loss(), r.loss(), r.samples_per_second(), r.compute_s(),
                   r.wait_s(), r.encode_s(), r.decode_s(), r.seal_s(), r.open_s()});
  }
  std::erase_if(sites_, [&](const auto& entry) { return !seen.contains(entry.first); });

  seen.clear();
  for (const v1::LinkMetrics& link : state.links()) {
    std::string key = LinkKey(link);
    seen.insert(key);
    auto [it, inserted] = links_.try_emplace(key);
    LinkSeries& series = it->second;
    if (!inserted && unix_ms > series.last_unix_ms) {
      double seconds = static_cast<double>(unix_ms - series.last_unix_ms) / 1000.0;
      auto growth = [](uint64_t now, uint64_t before) {
        return now >= before ? now - before : now;
      };
      Push(series.points,
           LinkPoint{unix_ms, growth(link.raw_bytes(), series.last_raw_bytes) / seconds,
                     growth(link.wire_bytes(), series.last_wire_bytes) / seconds});
    }
    series.replica = link.replica();
    series.boundary = link.boundary();
    series.direction = link.direction();
    series.last_unix_ms = unix_ms;
    series.last_raw_bytes = link.raw_bytes();
    series.last_wire_bytes = link.wire_bytes();
  }
  std::erase_if(links_, [&](const auto& entry) { return !seen.contains(entry.first); });
}

std::string History::ToJson(uint64_t since_unix_ms) const {
  using nlohmann::json;
  json sites = json::object();
  for (const auto& [id, points] : sites_) {
    json t = json::array(), step = json::array(), loss = json::array(), sps = json::array();
    json compute = json::array(), wait = json::array(), encode = json::array(),
         decode = json::array(), seal = json::array(), open = json::array();
    for (auto p = NewerThan(points, since_unix_ms); p != points.end(); ++p) {
      t.push_back(p->unix_ms);
      step.push_back(p->step);
      loss.push_back(p->has_loss ? json(p->loss) : json(nullptr));
      sps.push_back(p->samples_per_second);
      compute.push_back(p->compute_s);
      wait.push_back(p->wait_s);
      encode.push_back(p->encode_s);
      decode.push_back(p->decode_s);
      seal.push_back(p->seal_s);
      open.push_back(p->open_s);
    }
    sites[id] = {{"t", t},
                 {"step", step},
                 {"loss", loss},
                 {"samples_per_second", sps},
                 {"compute_s", compute},
                 {"wait_s", wait},
                 {"encode_s", encode},
                 {"decode_s", decode},
                 {"seal_s", seal},
                 {"open_s", open}};
  }
  json links = json::object();
  for (const auto& [key, series] : links_) {
    json t = json::array(), raw = json::array(), wire = json::array();
    for (auto p = NewerThan(series.points, since_unix_ms); p != series.points.end(); ++p) {
      t.push_back(p->unix_ms);
      raw.push_back(p->raw_bytes_per_s);
      wire.push_back(p->wire_bytes_per_s);
    }
    links[key] = {{"replica", series.replica},
                  {"boundary", series.boundary},
                  {"direction", DirectionName(series.direction)},
                  {"t", t},
                  {"raw_bytes_per_s", raw},
                  {"wire_bytes_per_s", wire}};
  }
  json out = {{"capacity", capacity_}, {"sites", sites}, {"links", links}};
  // Replace invalid UTF-8 in site ids instead of throwing: this never fails.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace strait::gateway
