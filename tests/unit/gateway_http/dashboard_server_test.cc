// The server over real loopback sockets: routes, token, methods, malformed and oversized requests,
// keep-alive, many clients at once, the connection limit, and the history growing while it runs.
#include "gateway/http/dashboard_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tests/unit/gateway_http/fake_federation.h"
#include "tests/unit/gateway_http/http_client.h"

namespace strait::gateway {
namespace {

namespace http = boost::beast::http;
using testing::Fetch;
using testing::SendRaw;

std::unique_ptr<DashboardServer> StartServer(DashboardOptions options = {}) {
  auto server = DashboardServer::Start(std::move(options), testing::FakeSnapshotSource(20));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(DashboardServer, ServesEveryRouteOverLoopback) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);

  auto page = Fetch(server->port(), "/");
  EXPECT_EQ(page.result(), http::status::ok);
  EXPECT_NE(page.body().find("<canvas"), std::string::npos);
  EXPECT_EQ(Fetch(server->port(), "/dashboard.js").result(), http::status::ok);
  EXPECT_EQ(Fetch(server->port(), "/dashboard.css").result(), http::status::ok);

  auto metrics = Fetch(server->port(), "/metrics");
  EXPECT_EQ(metrics.result(), http::status::ok);
  EXPECT_NE(metrics.body().find("# TYPE strait_link_wire_bytes_total counter\n"),
            std::string::npos);

  auto state = Fetch(server->port(), "/api/state");
  ASSERT_EQ(state.result(), http::status::ok);
  nlohmann::json j = nlohmann::json::parse(state.body());
  ASSERT_EQ(j["state"]["view"]["sites"].size(), 3u);
  EXPECT_EQ(j["state"]["view"]["sites"][1]["id"], "dc-b");
  EXPECT_EQ(j["state"]["view"]["sites"][1]["layers"]["start"], 2);
  EXPECT_EQ(j["state"]["view"]["sites"][1]["state"], "SITE_TRAINING");
  EXPECT_FALSE(j["state"].contains("insecure"));  // The plaintext mode is gone (issue 45).
  EXPECT_EQ(j["sample_interval_ms"], 1000);
  EXPECT_TRUE(j["history"]["sites"]["dc-c"]["loss"].is_array());

  EXPECT_EQ(Fetch(server->port(), "/nope").result(), http::status::not_found);
  auto post = Fetch(server->port(), "/api/state", "POST", {{"Content-Type", "text/plain"}});
  EXPECT_EQ(post.result(), http::status::method_not_allowed);
  auto head = Fetch(server->port(), "/metrics", "HEAD");
  EXPECT_EQ(head.result(), http::status::ok);
  EXPECT_TRUE(head.body().empty());
  EXPECT_GT(std::stoul(std::string(head[http::field::content_length])), 1000u);
}

TEST(DashboardServer, TokenIsRequiredOnEveryRoute) {
  auto server = StartServer({.token = "t0k3n"});
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/", "/dashboard.js", "/api/state", "/metrics", "/nope"}) {
    EXPECT_EQ(Fetch(server->port(), path).result(), http::status::unauthorized) << path;
    EXPECT_EQ(Fetch(server->port(), path, "GET", {{"Authorization", "Bearer nope"}}).result(),
              http::status::unauthorized)
        << path;
  }
  EXPECT_EQ(Fetch(server->port(), "/metrics", "GET", {{"Authorization", "Bearer t0k3n"}}).result(),
            http::status::ok);
  EXPECT_EQ(Fetch(server->port(), "/?token=t0k3n").result(), http::status::ok);
  EXPECT_EQ(Fetch(server->port(), "/metrics", "POST", {{"Authorization", "Bearer t0k3n"}}).result(),
            http::status::method_not_allowed);
}

TEST(DashboardServer, HistoryGrowsAndStepRises) {
  auto server = StartServer({.sample_interval = std::chrono::milliseconds(20)});
  ASSERT_NE(server, nullptr);
  nlohmann::json history;
  // Polls until at least 4 samples are in (no timing assertion: the deadline only bounds a hang).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    history = nlohmann::json::parse(Fetch(server->port(), "/api/state").body())["history"];
  } while (history["sites"]["dc-c"]["t"].size() < 4 && std::chrono::steady_clock::now() < deadline);
  const nlohmann::json& dc_c = history["sites"]["dc-c"];
  ASSERT_GE(dc_c["t"].size(), 4u);
  ASSERT_EQ(dc_c["step"].size(), dc_c["t"].size());
  for (size_t i = 1; i < dc_c["t"].size(); ++i) {
    EXPECT_GE(dc_c["t"][i].get<uint64_t>(), dc_c["t"][i - 1].get<uint64_t>());
    EXPECT_GE(dc_c["step"][i].get<uint64_t>(), dc_c["step"][i - 1].get<uint64_t>());
  }
  EXPECT_GE(history["links"]["0/forward"]["t"].size(), 3u);
  // A page that polls with `since` gets only what is new.
  uint64_t last = dc_c["t"].back().get<uint64_t>();
  nlohmann::json newer = nlohmann::json::parse(
      Fetch(server->port(), "/api/state?since=" + std::to_string(last)).body())["history"];
  for (const auto& t : newer["sites"]["dc-c"]["t"]) EXPECT_GT(t.get<uint64_t>(), last);
}

TEST(DashboardServer, MalformedRequestsGetErrorsAndTheServerKeepsServing) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  auto status_of = [](const std::string& reply) { return reply.substr(0, reply.find("\r\n")); };

  EXPECT_EQ(status_of(SendRaw(port, "GARBAGE\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_of(SendRaw(port, "GET / HTTP/9.9\r\n\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_of(SendRaw(port, "GET /metrics HTTP/1.1\r\nHost x\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_of(SendRaw(port, "GET /metrics HTTP/1.1\r\nContent-Length: -5\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_of(SendRaw(port, std::string("GET /\0 HTTP/1.1\r\n\r\n", 19))),
            "HTTP/1.1 400 Bad Request");
  std::string huge_header = "GET / HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_EQ(status_of(SendRaw(port, huge_header)), "HTTP/1.1 431 Request Header Fields Too Large");
  std::string huge_target = "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n";
  EXPECT_EQ(status_of(SendRaw(port, huge_target)), "HTTP/1.1 431 Request Header Fields Too Large");
  std::string huge_body =
      "POST /api/state HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n" + std::string(100000, 'b');
  EXPECT_EQ(status_of(SendRaw(port, huge_body)), "HTTP/1.1 413 Payload Too Large");
  std::string chunked =
      "POST /api/state HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "zz\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(status_of(SendRaw(port, chunked)), "HTTP/1.1 400 Bad Request");
  // A request cut off in the middle, and a connection with nothing sent: no answer, no harm.
  EXPECT_EQ(SendRaw(port, "GET /metr"), "");
  EXPECT_EQ(SendRaw(port, ""), "");

  EXPECT_EQ(Fetch(port, "/metrics").result(), http::status::ok);
}

TEST(DashboardServer, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  // Two pipelined requests in one write, then a third after the answers.
  std::string two =
      "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\nHEAD /api/state HTTP/1.1\r\nHost: a\r\n"
      "\r\nGET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  std::string replies = SendRaw(server->port(), two);
  size_t first = replies.find("HTTP/1.1 200 OK");
  size_t second = replies.find("HTTP/1.1 200 OK", first + 1);
  size_t third = replies.find("HTTP/1.1 404 Not Found", second + 1);
  EXPECT_NE(first, std::string::npos);
  EXPECT_NE(second, std::string::npos);
  EXPECT_NE(third, std::string::npos);
}

TEST(DashboardServer, ServesManyClientsAtOnce) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  constexpr int kClients = 48, kRequests = 5;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int r = 0; r < kRequests; ++r) {
        const char* target = (c + r) % 2 ? "/metrics" : "/api/state";
        if (Fetch(server->port(), target).result() == http::status::ok) ok.fetch_add(1);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients * kRequests);
}

TEST(DashboardServer, ConnectionsPastTheLimitAreClosed) {
  auto server = StartServer({.max_connections = 2});
  ASSERT_NE(server, nullptr);
  namespace asio = boost::asio;
  asio::io_context io;
  auto endpoint = asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                          static_cast<uint16_t>(server->port()));
  // Two kept-alive connections, each proven to be a served session by one answered request.
  std::vector<asio::ip::tcp::socket> held;
  for (int i = 0; i < 2; ++i) {
    held.emplace_back(io);
    held.back().connect(endpoint);
    http::request<http::empty_body> request{http::verb::get, "/metrics", 11};
    http::write(held.back(), request);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(held.back(), buffer, response);
    EXPECT_EQ(response.result(), http::status::ok);
  }
  EXPECT_EQ(SendRaw(server->port(), "GET /metrics HTTP/1.1\r\n\r\n"), "");
  held.clear();  // Closing them frees their slots (once the server sees the close).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string reply;
  while (reply.empty() && std::chrono::steady_clock::now() < deadline) {
    reply = SendRaw(server->port(), "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  }
  EXPECT_EQ(reply.substr(0, 15), "HTTP/1.1 200 OK");
}

TEST(DashboardServer, StopsWithClientsConnected) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket idle(io);
  idle.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                       static_cast<uint16_t>(server->port())));
  asio::write(idle, asio::buffer(std::string("GET /metr")));  // Half a request, then silence.
  server.reset();  // Must return promptly, not wait for the client.
  char byte;
  boost::system::error_code ec;
  idle.read_some(asio::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec) << "the connection is closed";
}

TEST(DashboardServer, BadOptionsAreErrors) {
  auto source = testing::FakeSnapshotSource();
  EXPECT_EQ(DashboardServer::Start({.address = "no-port"}, source).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DashboardServer::Start({.address = "127.0.0.1:http"}, source).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DashboardServer::Start({.address = "127.0.0.1:99999"}, source).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DashboardServer::Start({.history = 0}, source).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DashboardServer::Start({}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A port in use cannot be bound twice.
  auto first = StartServer();
  ASSERT_NE(first, nullptr);
  auto second =
      DashboardServer::Start({.address = "127.0.0.1:" + std::to_string(first->port())}, source);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(DashboardServer, ListensOnIpv6Loopback) {
  auto server = DashboardServer::Start({.address = "[::1]:0"}, testing::FakeSnapshotSource());
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  EXPECT_GT((*server)->port(), 0);
}

}  // namespace
}  // namespace strait::gateway
