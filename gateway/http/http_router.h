// The dashboard's request handling, independent of sockets: one parsed request in, one response
// out. DashboardServer feeds it from the network; the fuzz target and unit tests feed it directly.
//
// Routes (GET and HEAD only, others 405):
//   /, /index.html, /dashboard.{css,js}, /favicon.svg  the page (gateway/web, embedded)
//   /api/state[?since=UNIX_MS]                      DashboardState::StateJson
//   /metrics                                        Prometheus text of the latest snapshot
// With a token configured every route needs `Authorization: Bearer <token>`; 401 otherwise. For a
// browser, which cannot add that header to a navigation, the page may be opened once with
// `?token=<token>`: the answer sets the HttpOnly, SameSite=Strict cookie `strait_token`, which the
// browser then sends with the page's assets, fetches and reloads, and which is accepted too.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <string>
#include <string_view>

#include "gateway/http/dashboard_state.h"

namespace strait::gateway {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Request size bounds: the parser refuses larger headers (431) and bodies (413).
inline constexpr size_t kMaxRequestHeaderBytes = 8 * 1024;
inline constexpr size_t kMaxRequestBodyBytes = 4 * 1024;

// Sets the size bounds on a Beast request parser (any body type).
template <typename Parser>
void ApplyRequestLimits(Parser& parser) {
  parser.header_limit(kMaxRequestHeaderBytes);
  parser.body_limit(kMaxRequestBodyBytes);
}

// Thread-safe (Handle is const and DashboardState is thread-safe).
class HttpRouter {
 public:
  // `state` is not owned and must outlive the router. `token` empty: no authentication.
  HttpRouter(const DashboardState* state, std::string token);

  // Answers `request`. The response's keep-alive follows the request's. Never throws.
  HttpResponse Handle(const HttpRequest& request) const;

  // A plain-text error response (e.g. 400 for a request the parser refused), `Connection: close`.
  static HttpResponse Error(boost::beast::http::status status, unsigned version,
                            std::string_view detail);

 private:
  enum class Auth { kDenied, kByHeaderOrCookie, kByQuery };
  Auth Authenticate(const HttpRequest& request, std::string_view query) const;

  const DashboardState* state_;
  std::string token_;
};

// The value of query parameter `name` in `query` (the text after '?'), percent-decoded; empty when
// absent.
std::string QueryParameter(std::string_view query, std::string_view name);

// The value of cookie `name` in a Cookie header value ("a=1; b=2"), percent-decoded; empty when
// absent.
std::string CookieValue(std::string_view cookies, std::string_view name);

}  // namespace strait::gateway
