#include "gateway/http/dashboard_server.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/status.h"
#include "gateway/http/dashboard_state.h"
#include "gateway/http/http_router.h"

namespace strait::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// A client gets this long to send a request (also the idle limit of a kept-alive connection) and to
// take a response: slow or silent clients cannot pin connections.
constexpr std::chrono::seconds kReadTimeout{15};
constexpr std::chrono::seconds kWriteTimeout{30};

uint64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Splits "host:port" or "[v6]:port"; the port is a number 0..65535.
absl::StatusOr<std::pair<std::string, std::string>> SplitAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  if (colon == 0 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535) {
    return absl::InvalidArgumentError("dashboard address '" + address +
                                      "' is not host:port with a port 0..65535");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

// One connection: reads requests one at a time and answers each through the router.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpRouter* router, std::atomic<size_t>* connections)
      : stream_(std::move(socket)), router_(router), connections_(connections) {}
  ~Session() { connections_->fetch_sub(1); }

  void Read() {
    parser_.emplace();
    ApplyRequestLimits(*parser_);
    stream_.expires_after(kReadTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

 private:
  void OnRead(beast::error_code ec, size_t) {
    if (ec) {
      std::optional<http::status> status;
      if (ec == http::error::body_limit) {
        status = http::status::payload_too_large;
      } else if (ec == http::error::header_limit) {
        status = http::status::request_header_fields_too_large;
      } else if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
                 ec != http::error::end_of_stream && ec != http::error::partial_message) {
        status = http::status::bad_request;
      }
      // Anything else (the client left, timed out, or hung up mid-request) needs no answer.
      if (!status) return Close();
      return Write(HttpRouter::Error(*status, 11, ec.message()));
    }
    Write(router_->Handle(parser_->get()));
  }

  void Write(HttpResponse response) {
    response_ = std::move(response);
    stream_.expires_after(kWriteTimeout);
    http::async_write(stream_, response_,
                      beast::bind_front_handler(&Session::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, size_t) {
    if (ec) return;
    if (!response_.keep_alive()) return Close();
    Read();
  }

  // Ends the connection gracefully: after our FIN, reads and drops what the client still sends
  // (e.g. the rest of a refused oversized body) until it closes too, for at most kLingerBytes or
  // kReadTimeout. Closing with unread input would reset the connection, and a reset can destroy
  // the error answer before the client reads it.
  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    Drain(0);
  }

  void Drain(size_t drained) {
    if (drained > kLingerBytes) return;
    stream_.expires_after(kReadTimeout);
    stream_.async_read_some(asio::buffer(discard_),
                            [self = shared_from_this(), drained](beast::error_code ec, size_t n) {
                              if (!ec) self->Drain(drained + n);
                            });
  }

  static constexpr size_t kLingerBytes = 1 << 20;
  char discard_[4096];

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpResponse response_;
  const HttpRouter* router_;
  std::atomic<size_t>* connections_;
};

}  // namespace

// Member order matters for destruction: the io_context (which owns the sessions through their
// pending handlers) goes before the router and counter they point to.
struct DashboardServer::Impl {
  Impl(const DashboardOptions& options, SnapshotFn snapshot_fn)
      : options(options),
        snapshot(std::move(snapshot_fn)),
        state(options.history, options.sample_interval.count()),
        router(&state, options.token) {}

  void Accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;
      if (ec) {
        // E.g. out of file descriptors: retry a little later instead of spinning.
        accept_backoff.expires_after(std::chrono::milliseconds(50));
        accept_backoff.async_wait([this](beast::error_code) { Accept(); });
        return;
      }
      if (connections.fetch_add(1) < options.max_connections) {
        std::make_shared<Session>(std::move(socket), &router, &connections)->Read();
      } else {
        connections.fetch_sub(1);  // Over the limit: `socket` closes as it goes out of scope.
      }
      Accept();
    });
  }

  void Sample() {
    std::unique_lock lock(stop_mu);
    while (!stop_cv.wait_for(lock, options.sample_interval, [this] { return stopping; })) {
      lock.unlock();
      state.Update(snapshot(), NowUnixMs());
      lock.lock();
    }
  }

  const DashboardOptions options;
  const SnapshotFn snapshot;
  DashboardState state;
  HttpRouter router;
  std::atomic<size_t> connections{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};
  int port = 0;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;  // Guarded by stop_mu.
  std::thread io_thread;
  std::thread sampler_thread;
};

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(DashboardOptions options,
                                                                        SnapshotFn snapshot) {
  if (!snapshot) return absl::InvalidArgumentError("dashboard: no snapshot callback");
  if (options.sample_interval.count() <= 0 || options.history == 0 ||
      options.max_connections == 0) {
    return absl::InvalidArgumentError(
        "dashboard: sample_interval, history and max_connections must be positive");
  }
  STRAIT_ASSIGN_OR_RETURN(auto host_port, SplitAddress(options.address));
  auto impl = std::make_unique<Impl>(options, std::move(snapshot));

  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(host_port.first, host_port.second,
                                    tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError("dashboard address '" + options.address +
                                      "' does not resolve: " + ec.message());
  }
  tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = impl->acceptor;
  if (acceptor.open(endpoint.protocol(), ec); !ec) {
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError("dashboard cannot listen on " + options.address + ": " +
                                  ec.message());
  }
  impl->port = acceptor.local_endpoint(ec).port();

  impl->state.Update(impl->snapshot(), NowUnixMs());
  impl->Accept();
  Impl* raw = impl.get();
  impl->io_thread = std::thread([raw] { raw->io.run(); });
  impl->sampler_thread = std::thread([raw] { raw->Sample(); });
  return std::unique_ptr<DashboardServer>(new DashboardServer(std::move(impl)));
}

DashboardServer::DashboardServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DashboardServer::~DashboardServer() {
  {
    std::lock_guard lock(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  impl_->sampler_thread.join();
  impl_->io.stop();
  impl_->io_thread.join();
}

int DashboardServer::port() const { return impl_->port; }

}  // namespace strait::gateway
