#include "tests/unit/gateway_http/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace strait::gateway::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// A blocking socket connected to the server; reads and writes give up after 10 s, so a server
// that hangs fails the test instead of hanging it.
tcp::socket Connect(asio::io_context& io, int port) {
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
  timeval timeout{10, 0};
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  return socket;
}

}  // namespace

Response Fetch(int port, const std::string& target, const std::string& method,
               const std::map<std::string, std::string>& headers) {
  asio::io_context io;
  tcp::socket stream = Connect(io, port);
  http::request<http::string_body> request{http::string_to_verb(method), target, 11};
  request.set(http::field::host, "127.0.0.1");
  for (const auto& [name, value] : headers) request.set(name, value);
  request.prepare_payload();
  http::write(stream, request);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.skip(method == "HEAD");  // A HEAD answer has Content-Length but no body.
  http::read(stream, buffer, parser);
  beast::error_code ignored;
  stream.shutdown(tcp::socket::shutdown_both, ignored);
  return parser.release();
}

std::string SendRaw(int port, const std::string& bytes) {
  asio::io_context io;
  tcp::socket stream = Connect(io, port);
  beast::error_code ec;
  asio::write(stream, asio::buffer(bytes), ec);     // The server may close early: fine.
  stream.shutdown(tcp::socket::shutdown_send, ec);  // Nothing more: the server sees the end.
  std::string received;
  char chunk[4096];
  for (;;) {
    size_t n = stream.read_some(asio::buffer(chunk), ec);
    received.append(chunk, n);
    if (ec) break;
  }
  return received;
}

}  // namespace strait::gateway::testing
