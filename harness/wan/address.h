// "HOST:PORT" addresses for the link emulator and its control socket: parsing, binding a listener,
// and printing what was bound.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strait::harness {

// "host:port" or "[v6]:port" -> {host, port}, the port a number 0..65535. InvalidArgument
// otherwise.
absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address);

// Opens, binds (port 0: a free one) and listens `acceptor` on `address` (numeric or a host name;
// the first resolved address is used). InvalidArgument when it does not parse or resolve,
// Unavailable when it cannot be bound. Blocks for a name lookup at most.
absl::Status Listen(boost::asio::ip::tcp::acceptor& acceptor, const std::string& address);

// "127.0.0.1:PORT" or "[::1]:PORT".
std::string EndpointString(const boost::asio::ip::tcp::endpoint& endpoint);

}  // namespace strait::harness
