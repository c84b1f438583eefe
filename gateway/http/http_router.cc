#include "gateway/http/http_router.h"

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <cctype>
#include <charconv>
#include <cstdint>

#include "gateway/http/prometheus_text.h"
#include "gateway/http/web_assets.h"

namespace strait::gateway {
namespace http = boost::beast::http;
namespace {

constexpr std::string_view kPageSecurityPolicy =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'none'";
constexpr std::string_view kTokenCookie = "strait_token";

// Compares in time that depends only on the length of `given`, never on where a mismatch is, so a
// token cannot be guessed byte by byte from response times. `expected` is not empty.
bool ConstantTimeEquals(std::string_view given, std::string_view expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out.append({'%', kHex[c >> 4], kHex[c & 15]});
    }
  }
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

std::string PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
               HexValue(text[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

HttpResponse Respond(const HttpRequest& request, http::status status, std::string_view type,
                     std::string body) {
  HttpResponse response{status, request.version()};
  response.set(http::field::server, "strait-gateway");
  response.set(http::field::content_type, boost::beast::string_view(type.data(), type.size()));
  response.set(http::field::cache_control, "no-store");
  response.set("X-Content-Type-Options", "nosniff");
  response.set("Referrer-Policy", "no-referrer");
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

HttpResponse Text(const HttpRequest& request, http::status status, std::string_view detail) {
  return Respond(request, status, "text/plain; charset=utf-8",
                 std::to_string(static_cast<unsigned>(status)) + " " +
                     std::string(http::obsolete_reason(status)) + ": " + std::string(detail) +
                     "\n");
}

}  // namespace

std::string QueryParameter(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    size_t end = query.find('&');
    std::string_view pair = query.substr(0, end);
    query = end == std::string_view::npos ? std::string_view() : query.substr(end + 1);
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return PercentDecode(pair.substr(eq + 1));
    }
  }
  return "";
}

std::string CookieValue(std::string_view cookies, std::string_view name) {
  while (!cookies.empty()) {
    size_t end = cookies.find(';');
    std::string_view pair = Trim(cookies.substr(0, end));
    cookies = end == std::string_view::npos ? std::string_view() : cookies.substr(end + 1);
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      return PercentDecode(pair.substr(eq + 1));
    }
  }
  return "";
}

HttpRouter::HttpRouter(const DashboardState* state, std::string token)
    : state_(state), token_(std::move(token)) {}

HttpRouter::Auth HttpRouter::Authenticate(const HttpRequest& request,
                                          std::string_view query) const {
  if (token_.empty()) return Auth::kByHeaderOrCookie;
  auto header = request.find(http::field::authorization);
  if (header != request.end()) {
    std::string_view value(header->value().data(), header->value().size());
    constexpr std::string_view kScheme = "bearer ";
    if (value.size() > kScheme.size() &&
        EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme) &&
        ConstantTimeEquals(Trim(value.substr(kScheme.size())), token_)) {
      return Auth::kByHeaderOrCookie;
    }
  }
  for (auto it = request.find(http::field::cookie);
       it != request.end() && it->name() == http::field::cookie; ++it) {
    std::string cookie = CookieValue({it->value().data(), it->value().size()}, kTokenCookie);
    if (!cookie.empty() && ConstantTimeEquals(cookie, token_)) return Auth::kByHeaderOrCookie;
  }
  std::string from_query = QueryParameter(query, "token");
  if (!from_query.empty() && ConstantTimeEquals(from_query, token_)) return Auth::kByQuery;
  return Auth::kDenied;
}

HttpResponse HttpRouter::Handle(const HttpRequest& request) const {
  std::string_view target(request.target().data(), request.target().size());
  if (target.empty() || target.front() != '/') {
    return Text(request, http::status::bad_request, "the target must be a path");
  }
  size_t question = target.find('?');
  std::string_view path = target.substr(0, question);
  std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);

  HttpResponse response;
  Auth auth = Authenticate(request, query);
  if (auth == Auth::kDenied) {
    response = Text(request, http::status::unauthorized,
                    "send Authorization: Bearer <token> (or open the page with ?token=<token>)");
    response.set(http::field::www_authenticate, "Bearer realm=\"strait\"");
  } else if (request.method() != http::verb::get && request.method() != http::verb::head) {
    response = Text(request, http::status::method_not_allowed, "the dashboard is read-only");
    response.set(http::field::allow, "GET, HEAD");
  } else if (path == "/api/state") {
    uint64_t since = 0;
    std::string since_text = QueryParameter(query, "since");
    auto [end, ec] =
        std::from_chars(since_text.data(), since_text.data() + since_text.size(), since);
    if (!since_text.empty() &&
        (ec != std::errc() || end != since_text.data() + since_text.size())) {
      response = Text(request, http::status::bad_request, "since must be unix milliseconds");
    } else {
      response = Respond(request, http::status::ok, "application/json", state_->StateJson(since));
    }
  } else if (path == "/metrics") {
    response = Respond(request, http::status::ok, kPrometheusContentType, *state_->MetricsText());
  } else if (const WebAsset* asset = FindWebAsset(path)) {
    response =
        Respond(request, http::status::ok, ContentTypeOf(asset->path), std::string(asset->data));
    response.set("Content-Security-Policy",
                 boost::beast::string_view(kPageSecurityPolicy.data(), kPageSecurityPolicy.size()));
    response.set("X-Frame-Options", "DENY");
  } else {
    response = Text(request, http::status::not_found, "no such page");
  }
  if (auth == Auth::kByQuery) {
    std::string cookie = std::string(kTokenCookie) + "=" + PercentEncode(token_) +
                         "; Path=/; HttpOnly; SameSite=Strict";
    response.set(http::field::set_cookie, cookie);
  }
  if (request.method() == http::verb::head) {
    // HEAD: the headers of the GET answer, Content-Length included, without the body.
    size_t length = response.body().size();
    response.body().clear();
    response.content_length(length);
  }
  return response;
}

HttpResponse HttpRouter::Error(http::status status, unsigned version, std::string_view detail) {
  HttpRequest request{http::verb::get, "/", version};
  request.keep_alive(false);
  return Text(request, status, detail);
}

}  // namespace strait::gateway
