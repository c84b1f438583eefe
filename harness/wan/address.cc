#include "harness/wan/address.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strait::harness {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  int number = -1;
  if (colon == 0 || colon == std::string::npos || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return absl::InvalidArgumentError("address '" + address +
                                      "' is not HOST:PORT with a port 0..65535");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

absl::Status Listen(tcp::acceptor& acceptor, const std::string& address) {
  absl::StatusOr<std::pair<std::string, std::string>> host_port = SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  boost::system::error_code ec;
  tcp::resolver resolver(acceptor.get_executor());
  auto endpoints = resolver.resolve(host_port->first, host_port->second,
                                    tcp::resolver::numeric_service | tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError("address '" + address +
                                      "' does not resolve: " + ec.message());
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  if (acceptor.open(endpoint.protocol(), ec); !ec) {
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError("cannot listen on " + address + ": " + ec.message());
  return absl::OkStatus();
}

std::string EndpointString(const tcp::endpoint& endpoint) {
  const std::string host = endpoint.address().to_string();
  return endpoint.address().is_v6() ? absl::StrCat("[", host, "]:", endpoint.port())
                                    : absl::StrCat(host, ":", endpoint.port());
}

}  // namespace strait::harness
