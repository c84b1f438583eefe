// Request handling without sockets: routes, methods, authentication, HEAD, query parsing.
#include "gateway/http/http_router.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gateway/http/web_assets.h"
#include "tests/unit/gateway_http/fake_federation.h"

namespace strait::gateway {
namespace {

namespace http = boost::beast::http;

class HttpRouterTest : public ::testing::Test {
 protected:
  HttpRouterTest() : state_(16, 1000) { state_.Update(testing::FakeFederationState(10), 1234); }

  HttpResponse Get(const std::string& target, http::verb verb = http::verb::get,
                   const std::string& authorization = "") {
    HttpRequest request{verb, target, 11};
    if (!authorization.empty()) request.set(http::field::authorization, authorization);
    return router_.Handle(request);
  }

  std::string Header(const HttpResponse& response, http::field field) {
    return std::string(response[field]);
  }

  DashboardState state_;
  HttpRouter router_{&state_, ""};
};

TEST_F(HttpRouterTest, ServesThePageAndItsAssets) {
  for (const char* path : {"/", "/index.html"}) {
    HttpResponse response = Get(path);
    EXPECT_EQ(response.result(), http::status::ok) << path;
    EXPECT_EQ(Header(response, http::field::content_type), "text/html; charset=utf-8");
    EXPECT_NE(response.body().find("<canvas"), std::string::npos);
    EXPECT_FALSE(std::string(response["Content-Security-Policy"]).empty());
  }
  EXPECT_EQ(Header(Get("/dashboard.js"), http::field::content_type),
            "text/javascript; charset=utf-8");
  EXPECT_EQ(Header(Get("/dashboard.css"), http::field::content_type), "text/css; charset=utf-8");
  EXPECT_EQ(Header(Get("/favicon.svg"), http::field::content_type), "image/svg+xml");
  // Every embedded file is served byte for byte.
  for (const WebAsset& asset : EmbeddedWebAssets()) {
    EXPECT_EQ(Get(std::string(asset.path)).body(), asset.data) << asset.path;
  }
}

TEST_F(HttpRouterTest, ServesStateJsonAndMetrics) {
  HttpResponse state = Get("/api/state");
  EXPECT_EQ(state.result(), http::status::ok);
  EXPECT_EQ(Header(state, http::field::content_type), "application/json");
  nlohmann::json j = nlohmann::json::parse(state.body());
  EXPECT_EQ(j["sampled_unix_ms"], 1234);
  EXPECT_EQ(j["state"]["view"]["sites"].size(), 3u);
  EXPECT_EQ(j["history"]["sites"]["dc-a"]["t"], nlohmann::json({1234}));
  EXPECT_EQ(
      nlohmann::json::parse(Get("/api/state?since=1234").body())["history"]["sites"]["dc-a"]["t"],
      nlohmann::json::array());

  HttpResponse metrics = Get("/metrics");
  EXPECT_EQ(metrics.result(), http::status::ok);
  EXPECT_EQ(Header(metrics, http::field::content_type), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics.body().find("strait_site_step{site=\"dc-a\"} 40\n"), std::string::npos);
}

TEST_F(HttpRouterTest, UnknownPathsAre404) {
  for (const char* path : {"/nope", "/api", "/api/state/", "/index.html/", "/../etc/passwd",
                           "/%2e%2e/x", "/METRICS"}) {
    EXPECT_EQ(Get(path).result(), http::status::not_found) << path;
  }
}

TEST_F(HttpRouterTest, BadTargetsAndBadSinceAre400) {
  EXPECT_EQ(Get("*").result(), http::status::bad_request);
  EXPECT_EQ(Get("http://example/metrics").result(), http::status::bad_request);
  for (const char* since : {"abc", "-1", "12x", "99999999999999999999999"}) {
    EXPECT_EQ(Get(std::string("/api/state?since=") + since).result(), http::status::bad_request)
        << since;
  }
}

TEST_F(HttpRouterTest, OnlyGetAndHeadAreAllowed) {
  for (http::verb verb : {http::verb::post, http::verb::put, http::verb::delete_, http::verb::patch,
                          http::verb::options, http::verb::connect}) {
    HttpResponse response = Get("/api/state", verb);
    EXPECT_EQ(response.result(), http::status::method_not_allowed) << http::to_string(verb);
    EXPECT_EQ(Header(response, http::field::allow), "GET, HEAD");
  }
}

TEST_F(HttpRouterTest, HeadHasTheHeadersOfGetWithoutBody) {
  HttpResponse get = Get("/metrics");
  HttpResponse head = Get("/metrics", http::verb::head);
  EXPECT_EQ(head.result(), http::status::ok);
  EXPECT_TRUE(head.body().empty());
  EXPECT_EQ(Header(head, http::field::content_length), std::to_string(get.body().size()));
}

TEST_F(HttpRouterTest, KeepAliveFollowsTheRequest) {
  HttpRequest request{http::verb::get, "/metrics", 11};
  EXPECT_TRUE(router_.Handle(request).keep_alive());
  request.keep_alive(false);
  EXPECT_FALSE(router_.Handle(request).keep_alive());
  HttpRequest old{http::verb::get, "/metrics", 10};  // HTTP/1.0 closes by default.
  EXPECT_FALSE(router_.Handle(old).keep_alive());
}

TEST(HttpRouterToken, EveryRouteNeedsTheToken) {
  DashboardState state(4, 1000);
  HttpRouter router(&state, "s3cret token");
  auto get = [&](const std::string& target, const std::string& authorization,
                 http::verb verb = http::verb::get) {
    HttpRequest request{verb, target, 11};
    if (!authorization.empty()) request.set(http::field::authorization, authorization);
    return router.Handle(request).result();
  };
  for (const char* path : {"/", "/dashboard.js", "/api/state", "/metrics", "/nope"}) {
    EXPECT_EQ(get(path, ""), http::status::unauthorized) << path;
    EXPECT_EQ(get(path, "Bearer wrong"), http::status::unauthorized) << path;
    EXPECT_EQ(get(path, "Bearer s3cret"), http::status::unauthorized) << path;
    EXPECT_EQ(get(path, "Bearer s3cret token!"), http::status::unauthorized) << path;
    EXPECT_EQ(get(path, "Basic s3cret token"), http::status::unauthorized) << path;
    EXPECT_EQ(get(path, "s3cret token"), http::status::unauthorized) << path;
    EXPECT_EQ(get(path, "", http::verb::post), http::status::unauthorized) << path;
    EXPECT_EQ(get(std::string(path) + "?token=wrong", ""), http::status::unauthorized) << path;
  }
  EXPECT_EQ(get("/metrics", "Bearer s3cret token"), http::status::ok);
  EXPECT_EQ(get("/metrics", "bearer s3cret token"), http::status::ok);
  EXPECT_EQ(get("/metrics", "Bearer s3cret token", http::verb::post),
            http::status::method_not_allowed);
  EXPECT_EQ(get("/nope", "Bearer s3cret token"), http::status::not_found);
  // The query parameter, percent-encoded, for the browser's first navigation and assets.
  EXPECT_EQ(get("/?token=s3cret%20token", ""), http::status::ok);
  EXPECT_EQ(get("/dashboard.css?x=1&token=s3cret+token", ""), http::status::ok);
  EXPECT_EQ(get("/api/state?token=s3cret", ""), http::status::unauthorized);
  EXPECT_EQ(get("/api/state?token=", ""), http::status::unauthorized);

  HttpRequest request{http::verb::get, "/metrics", 11};
  EXPECT_EQ(std::string(router.Handle(request)[http::field::www_authenticate]),
            "Bearer realm=\"strait\"");
}

TEST(HttpRouterToken, TheQueryTokenSetsACookieThatAuthenticatesLaterRequests) {
  DashboardState state(4, 1000);
  HttpRouter router(&state, "s3cret;token");
  HttpResponse first = router.Handle(HttpRequest{http::verb::get, "/?token=s3cret%3Btoken", 11});
  EXPECT_EQ(first.result(), http::status::ok);
  EXPECT_EQ(std::string(first[http::field::set_cookie]),
            "strait_token=s3cret%3Btoken; Path=/; HttpOnly; SameSite=Strict");
  auto with_cookie = [&](const std::string& cookie) {
    HttpRequest request{http::verb::get, "/api/state", 11};
    request.set(http::field::cookie, cookie);
    HttpResponse response = router.Handle(request);
    EXPECT_TRUE(response.find(http::field::set_cookie) == response.end());  // Only ?token= sets it.
    return response.result();
  };
  EXPECT_EQ(with_cookie("strait_token=s3cret%3Btoken"), http::status::ok);
  EXPECT_EQ(with_cookie("a=b; strait_token=s3cret%3Btoken; c=d"), http::status::ok);
  EXPECT_EQ(with_cookie("strait_token=s3cret"), http::status::unauthorized);
  EXPECT_EQ(with_cookie("other_token=s3cret%3Btoken"), http::status::unauthorized);
  EXPECT_EQ(with_cookie("strait_token="), http::status::unauthorized);
  // A header-authenticated request gets no cookie.
  HttpRequest request{http::verb::get, "/metrics", 11};
  request.set(http::field::authorization, "Bearer s3cret;token");
  HttpResponse by_header = router.Handle(request);
  EXPECT_EQ(by_header.result(), http::status::ok);
  EXPECT_TRUE(by_header.find(http::field::set_cookie) == by_header.end());
}

TEST(CookieValue, FindsAndDecodes) {
  EXPECT_EQ(CookieValue("a=1; b=2", "b"), "2");
  EXPECT_EQ(CookieValue("a=1;b=%41", "b"), "A");
  EXPECT_EQ(CookieValue("ab=1", "b"), "");
  EXPECT_EQ(CookieValue(";;=;b", "b"), "");
  EXPECT_EQ(CookieValue("", "b"), "");
}

TEST(QueryParameter, FindsAndDecodes) {
  EXPECT_EQ(QueryParameter("a=1&b=2", "b"), "2");
  EXPECT_EQ(QueryParameter("a=1&b=2", "c"), "");
  EXPECT_EQ(QueryParameter("ab=1&b=%41%2f+x", "b"), "A/ x");
  EXPECT_EQ(QueryParameter("b=%4", "b"), "%4");  // Malformed escapes stay as they are.
  EXPECT_EQ(QueryParameter("b=%zz", "b"), "%zz");
  EXPECT_EQ(QueryParameter("&&b&b=", "b"), "");
  EXPECT_EQ(QueryParameter("", "b"), "");
}

}  // namespace
}  // namespace strait::gateway
