// Feeds arbitrary bytes to the dashboard's request path: Beast's request parser with the server's
// size limits, then the router, for every request in the bytes (pipelining). It must answer or
// refuse, never crash, hang or read out of bounds. The first byte picks whether a token is
// required. Seeds: tests/fuzz/corpus/http_request_fuzz/.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>

#include "gateway/http/dashboard_state.h"
#include "gateway/http/http_router.h"
#include "tests/unit/gateway_http/fake_federation.h"

namespace {

const strait::gateway::DashboardState& State() {
  static const auto* state = [] {
    auto* s = new strait::gateway::DashboardState(8, 1000);
    for (int i = 0; i < 3; ++i) s->Update(strait::gateway::testing::FakeFederationState(i), i);
    return s;
  }();
  return *state;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  if (size == 0) return 0;
  static const strait::gateway::HttpRouter open_router(&State(), "");
  static const strait::gateway::HttpRouter token_router(&State(), "fuzz-token");
  const strait::gateway::HttpRouter& router = data[0] & 1 ? token_router : open_router;
  ++data;
  --size;
  // Like the server: one parser per request, limits applied, until the bytes run out or an error.
  for (int requests = 0; size > 0 && requests < 16; ++requests) {
    http::request_parser<http::string_body> parser;
    strait::gateway::ApplyRequestLimits(parser);
    parser.eager(true);
    boost::beast::error_code ec;
    size_t used = 0;
    while (!parser.is_done() && !ec && used < size) {
      size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
      if (n == 0 && !ec) break;
      used += n;
    }
    if (ec || !parser.is_done()) break;
    strait::gateway::HttpResponse response = router.Handle(parser.get());
    (void)response;
    data += used;
    size -= used;
  }
  return 0;
}
