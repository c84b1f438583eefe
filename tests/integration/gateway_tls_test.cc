// The gateway speaks TLS 1.3 only (DESIGN.md §5, docs/security.md): a real strait-gateway process
// with the federation's certificates, and TLS clients made with OpenSSL in this process, which
// loads no TLS setting of the gateway's (so its clients offer exactly the versions asked for). A
// client limited to TLS 1.2 gets no handshake; one limited to TLS 1.3 gets one, with a site's
// certificate, as `openssl s_client -tls1_2` / `-tls1_3` would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "tests/integration/federation_fixture.h"
#include "tests/integration/loopback_socket.h"
#include "tests/integration/openssl_errors.h"

namespace strait::testing {
namespace {

constexpr char kJob[] = R"(name: tls-test
gateway: {memory_budget: 16MiB}
model: {family: mlp, input: 16, hidden: [16, 8], classes: 4}
data: {dataset: synthetic}
training: {steps: 1, global_batch: 16, microbatches: 2}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 2]}
  - {id: c, layers: [2, 3]}
)";

struct Handshake {
  bool ok = false;
  int version = 0;    // The negotiated version (TLS1_3_VERSION, ...) when ok.
  std::string error;  // OpenSSL's reasons otherwise.
};

// A TLS handshake with 127.0.0.1:`port` offering only `version`, as site `site` (its certificate
// from `certs`), asking for HTTP/2 as gRPC clients do.
Handshake HandshakeWith(int port, int version, const std::string& certs, const std::string& site) {
  Handshake result;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  if (ctx == nullptr || SSL_CTX_set_min_proto_version(ctx.get(), version) != 1 ||
      SSL_CTX_set_max_proto_version(ctx.get(), version) != 1 ||
      SSL_CTX_load_verify_locations(ctx.get(), (certs + "ca.pem").c_str(), nullptr) != 1 ||
      SSL_CTX_use_certificate_file(ctx.get(), (certs + site + ".pem").c_str(), SSL_FILETYPE_PEM) !=
          1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), (certs + site + ".key").c_str(), SSL_FILETYPE_PEM) !=
          1 ||
      SSL_CTX_set_alpn_protos(ctx.get(), kAlpn, sizeof(kAlpn)) != 0) {
    result.error = "client set-up: " + OpenSslErrors();
    return result;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  const int fd = testing::ConnectLoopback(port);
  if (fd < 0) {
    result.error = "connect failed";
    return result;
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  SSL_set_fd(ssl.get(), fd);
  result.ok = SSL_connect(ssl.get()) == 1;
  if (result.ok) {
    result.version = SSL_version(ssl.get());
    SSL_shutdown(ssl.get());
  } else {
    result.error = OpenSslErrors();
  }
  close(fd);
  return result;
}

TEST(GatewayTlsTest, ATls12ClientGetsNoHandshakeAndATls13ClientDoes) {
  BuildTreeFederation fed(kJob, {"a", "b", "c"});
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  const int port = std::stoi(fed.gateway_address().substr(fed.gateway_address().rfind(':') + 1));
  const std::string certs = fed.dir().File("certs") + "/";

  const Handshake tls13 = HandshakeWith(port, TLS1_3_VERSION, certs, "a");
  ASSERT_TRUE(tls13.ok) << tls13.error;
  EXPECT_EQ(tls13.version, TLS1_3_VERSION);

  const Handshake tls12 = HandshakeWith(port, TLS1_2_VERSION, certs, "a");
  EXPECT_FALSE(tls12.ok) << "the gateway negotiated TLS 1.2";
  // Refused by the gateway after this client offered TLS 1.2, not by this process's own settings.
  EXPECT_EQ(tls12.error.find("no protocols available"), std::string::npos) << tls12.error;
  EXPECT_EQ(tls12.error.find("client set-up"), std::string::npos) << tls12.error;

  // The gateway still serves TLS 1.3 clients after refusing one.
  EXPECT_TRUE(HandshakeWith(port, TLS1_3_VERSION, certs, "b").ok);
}

}  // namespace
}  // namespace strait::testing
