// A minimal blocking HTTP/1.1 client over loopback for the dashboard tests (Beast), plus a raw mode
// that sends arbitrary bytes.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <map>
#include <string>

namespace strait::gateway::testing {

using Response = boost::beast::http::response<boost::beast::http::string_body>;

// Sends one request to 127.0.0.1:`port` on a fresh connection and reads the answer. Throws
// (failing the test) on a network error.
Response Fetch(int port, const std::string& target, const std::string& method = "GET",
               const std::map<std::string, std::string>& headers = {});

// Sends `bytes` as they are and closes the sending side, then reads until the server closes the
// connection (or 10 s pass) and returns everything it sent.
std::string SendRaw(int port, const std::string& bytes);

}  // namespace strait::gateway::testing
