#include "harness/wan/control_server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <istream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "harness/wan/address.h"

namespace strait::harness {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr size_t kMaxLine = 1024;  // Longer requests close the connection.

// One client: reads a line, writes the answer, again until the client leaves.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, LinkEmulator* link)
      : socket_(std::move(socket)), input_(kMaxLine), link_(link) {}

  void Read() {
    asio::async_read_until(socket_, input_, '\n',
                           [self = shared_from_this()](error_code ec, size_t n) {
                             if (ec) return;  // Left, or sent an over-long line.
                             std::string line(n, '\0');
                             self->input_.sgetn(line.data(), static_cast<std::streamsize>(n));
                             self->answer_ = HandleControlLine(*self->link_, line) + "\n";
                             asio::async_write(self->socket_, asio::buffer(self->answer_),
                                               [self](error_code ec, size_t) {
                                                 if (!ec) self->Read();
                                               });
                           });
  }

 private:
  tcp::socket socket_;
  asio::streambuf input_;
  std::string answer_;
  LinkEmulator* link_;
};

}  // namespace

std::string StatsJson(const LinkEmulator::Stats& s) {
  return absl::StrFormat(
      R"({"bytes_up":%d,"bytes_down":%d,"connections":%d,"open_connections":%d,"failed_dials":%d,)"
      R"("state":"%s"})",
      s.bytes_up, s.bytes_down, s.connections, s.open_connections, s.failed_dials,
      StateName(s.state));
}

std::string HandleControlLine(LinkEmulator& link, std::string_view line) {
  const std::string command = absl::AsciiStrToLower(absl::StripAsciiWhitespace(std::string(line)));
  if (command == "cut") {
    link.Cut();
  } else if (command == "stall") {
    link.Stall();
  } else if (command == "restore") {
    link.Restore();
  } else if (command == "stats") {
    return StatsJson(link.stats());
  } else {
    return absl::StrCat("error: unknown command '", command, "' (cut, stall, restore, stats)");
  }
  return "ok";
}

// Member order matters for destruction: the io_context (whose handlers own the sessions) goes
// first.
struct ControlServer::Impl {
  void Accept() {
    acceptor.async_accept([this](error_code ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;
      if (!ec) std::make_shared<Session>(std::move(socket), link)->Read();
      Accept();
    });
  }

  LinkEmulator* link = nullptr;
  std::string address;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(const std::string& address,
                                                                    LinkEmulator* link) {
  auto impl = std::make_unique<Impl>();
  impl->link = link;
  STRAIT_RETURN_IF_ERROR(Listen(impl->acceptor, address));
  error_code ec;
  impl->address = EndpointString(impl->acceptor.local_endpoint(ec));
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  // Sessions idle in a read would keep run() going: stop the loop; the io_context's destruction
  // then frees them.
  impl_->io.stop();
  impl_->thread.join();
}

std::string ControlServer::address() const { return impl_->address; }

}  // namespace strait::harness
