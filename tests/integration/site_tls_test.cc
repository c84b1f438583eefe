// A site speaks TLS 1.3 only (DESIGN.md §5), whatever the gateway offers: a real gRPC channel with
// the site's credentials (MakeSiteChannelCredentials) dials TLS servers made with OpenSSL in this
// process, one limited to TLS 1.2 and one to TLS 1.3, that report how each handshake ended. Both
// servers' contexts are made before the site's credentials, whose TLS policy applies to contexts
// made after them, so the TLS 1.2 server keeps offering TLS 1.2 (a plain TLS 1.2 client proves it).
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "site/rpc/tls_credentials.h"
#include "tests/integration/loopback_socket.h"
#include "tests/integration/openssl_errors.h"
#include "tests/unit/crypto/test_pki.h"

namespace strait::testing {
namespace {

using crypto::testing::Pki;
using SslCtxPtr = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;

// gRPC's c-ares resolver leaks a few bytes at exit (LeakSanitizer reports it in sanitizer builds);
// every address here is numeric, which the native resolver handles.
[[maybe_unused]] const int kNativeResolver = setenv("GRPC_DNS_RESOLVER", "native", 0);

// A context limited to `version`, for a server (with the gateway's certificate) or a client.
SslCtxPtr ContextFor(bool server, int version) {
  SslCtxPtr ctx(SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()), SSL_CTX_free);
  EXPECT_NE(ctx, nullptr) << OpenSslErrors();
  if (ctx == nullptr) return ctx;
  EXPECT_EQ(SSL_CTX_set_min_proto_version(ctx.get(), version), 1);
  EXPECT_EQ(SSL_CTX_set_max_proto_version(ctx.get(), version), 1);
  if (server) {
    std::unique_ptr<BIO, decltype(&BIO_free)> cert(
        BIO_new_mem_buf(Pki().gateway.certificate_pem.data(),
                        static_cast<int>(Pki().gateway.certificate_pem.size())),
        BIO_free);
    std::unique_ptr<BIO, decltype(&BIO_free)> key(
        BIO_new_mem_buf(Pki().gateway.key_pem.data(),
                        static_cast<int>(Pki().gateway.key_pem.size())),
        BIO_free);
    std::unique_ptr<X509, decltype(&X509_free)> x509(
        PEM_read_bio_X509(cert.get(), nullptr, nullptr, nullptr), X509_free);
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(
        PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
    EXPECT_EQ(SSL_CTX_use_certificate(ctx.get(), x509.get()), 1) << OpenSslErrors();
    EXPECT_EQ(SSL_CTX_use_PrivateKey(ctx.get(), pkey.get()), 1) << OpenSslErrors();
  }
  return ctx;
}

struct Handshake {
  bool ok = false;
  int version = 0;    // The negotiated version when ok.
  std::string error;  // OpenSSL's reasons otherwise.
};

// A TLS server on 127.0.0.1 that takes one connection, runs the server's side of its handshake and
// reports how it ended.
class OneHandshakeServer {
 public:
  explicit OneHandshakeServer(SSL_CTX* ctx) : ctx_(ctx) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listener_, 4), 0);
    EXPECT_EQ(getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    result_ = std::async(std::launch::async, [this] { return Serve(); });
  }
  ~OneHandshakeServer() {
    if (result_.valid()) result_.wait();
    close(listener_);
  }

  int port() const { return port_; }
  // Waits for the handshake (at most 20 s for the connection).
  Handshake Result() { return result_.get(); }

 private:
  Handshake Serve() {
    Handshake result;
    pollfd waiting{.fd = listener_, .events = POLLIN, .revents = 0};
    if (poll(&waiting, 1, 20'000) != 1) {
      result.error = "no connection within 20 s";
      return result;
    }
    const int fd = accept(listener_, nullptr, nullptr);
    if (fd < 0) {
      result.error = "accept failed";
      return result;
    }
    timeval timeout{.tv_sec = 10, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx_), SSL_free);
    SSL_set_fd(ssl.get(), fd);
    result.ok = SSL_accept(ssl.get()) == 1;
    if (result.ok) {
      result.version = SSL_version(ssl.get());
    } else {
      result.error = OpenSslErrors();
    }
    close(fd);
    return result;
  }

  SSL_CTX* const ctx_;
  int listener_ = -1;
  int port_ = 0;
  std::future<Handshake> result_;
};

// A plain OpenSSL client's handshake with 127.0.0.1:`port`.
bool ClientHandshakes(SSL_CTX* ctx, int port) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return false;
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx), SSL_free);
  SSL_set_fd(ssl.get(), fd);
  const bool ok = SSL_connect(ssl.get()) == 1;
  close(fd);
  return ok;
}

// Dials 127.0.0.1:`port` over a gRPC channel with site east's credentials, so that the server sees
// one handshake. The channel itself never becomes ready: the servers speak no HTTP/2.
void DialAsSite(int port) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      site::MakeSiteChannelCredentials({Pki().ca.certificate_pem, Pki().east});
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), *credentials);
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(3));
}

TEST(SiteTlsTest, ASiteHandshakesWithATls13ServerAndRefusesATls12One) {
  // A server that writes after its peer hung up (session tickets) gets EPIPE, not a signal.
  signal(SIGPIPE, SIG_IGN);
  // Every context is made before the site's credentials exist.
  SslCtxPtr server12 = ContextFor(/*server=*/true, TLS1_2_VERSION);
  SslCtxPtr server13 = ContextFor(/*server=*/true, TLS1_3_VERSION);
  SslCtxPtr client12 = ContextFor(/*server=*/false, TLS1_2_VERSION);
  ASSERT_TRUE(server12 && server13 && client12);

  {  // The TLS 1.2 server works: a TLS 1.2 client gets a handshake.
    OneHandshakeServer server(server12.get());
    EXPECT_TRUE(ClientHandshakes(client12.get(), server.port()));
    const Handshake handshake = server.Result();
    ASSERT_TRUE(handshake.ok) << handshake.error;
    EXPECT_EQ(handshake.version, TLS1_2_VERSION);
  }
  {  // The site handshakes with a TLS 1.3 server.
    OneHandshakeServer server(server13.get());
    DialAsSite(server.port());
    const Handshake handshake = server.Result();
    ASSERT_TRUE(handshake.ok) << handshake.error;
    EXPECT_EQ(handshake.version, TLS1_3_VERSION);
  }
  {  // The site offers nothing a TLS 1.2 server can take.
    OneHandshakeServer server(server12.get());
    DialAsSite(server.port());
    const Handshake handshake = server.Result();
    EXPECT_FALSE(handshake.ok) << "the site negotiated TLS 1.2";
    EXPECT_NE(handshake.error.find("unsupported protocol"), std::string::npos) << handshake.error;
  }
}

}  // namespace
}  // namespace strait::testing
