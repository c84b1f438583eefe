#include "harness/wan/link_emulator.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <future>
#include <random>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "harness/wan/address.h"
#include "harness/wan/emulator_thread.h"
#include "harness/wan/link_model.h"

namespace strait::harness {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadSize = 64 << 10;
// A piece smaller than this is moved into a buffer of its own size, so that a stream of small
// writes does not hold 64 KiB per piece.
constexpr size_t kSmallPiece = 8 << 10;
// One async_write gathers at most this much of what is due.
constexpr size_t kMaxBatchBytes = 4 << 20;
constexpr size_t kMaxBatchPieces = 128;

class Connection;

// Everything the I/O thread shares between connections. Members are touched on the I/O thread
// only, except the atomics. Held by every connection: an emulator's handlers may still run, with
// operation_aborted, on a shared thread after the emulator is gone.
struct Link {
  Link(LinkProfile p, std::chrono::milliseconds dial, uint64_t seed)
      : profile(std::move(p)),
        dial_timeout(dial),
        up(profile, seed, Clock::now()),
        down(profile, seed ^ 0x9e3779b97f4a7c15ULL, Clock::now()) {}

  const LinkProfile profile;
  const std::chrono::milliseconds dial_timeout;
  DirectionModel up;    // client -> server
  DirectionModel down;  // server -> client
  LinkEmulator::State state = LinkEmulator::State::kUp;
  bool stopping = false;
  std::unordered_set<Connection*> connections;
  tcp::resolver::results_type forward;

  std::atomic<LinkEmulator::State> requested_state{LinkEmulator::State::kUp};
  std::atomic<uint64_t> bytes_up{0}, bytes_down{0}, accepted{0}, open{0}, failed_dials{0};
};

// One forwarded connection: two sockets and a pipe each way.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<Link> link, tcp::socket client)
      : link_(std::move(link)),
        client_(std::move(client)),
        server_(client_.get_executor()),
        dial_timer_(client_.get_executor()),
        up_(&client_, &server_, &link_->up, &link_->bytes_up, client_.get_executor()),
        down_(&server_, &client_, &link_->down, &link_->bytes_down, client_.get_executor()) {
    link_->connections.insert(this);
  }
  ~Connection() { link_->connections.erase(this); }

  // Dials the forward address, then starts both pipes. A dial that fails or does not finish
  // within the link's dial timeout closes the client's connection and is counted in
  // failed_dials.
  void Start() {
    dial_timer_.expires_after(link_->dial_timeout);
    dial_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->closed_ || self->counted_) return;
      self->link_->failed_dials.fetch_add(1);
      self->Close();  // async_connect then ends with operation_aborted.
    });
    asio::async_connect(server_, link_->forward,
                        [self = shared_from_this()](error_code ec, const tcp::endpoint&) {
                          self->dial_timer_.cancel();
                          if (self->closed_) return;  // Timed out, cut, or stopping.
                          if (ec) {
                            self->link_->failed_dials.fetch_add(1);
                            return self->Close();
                          }
                          self->link_->accepted.fetch_add(1);
                          self->link_->open.fetch_add(1);
                          self->counted_ = true;
                          // Pieces go out as they are due, not when Nagle thinks fit.
                          error_code ignored;
                          self->client_.set_option(tcp::no_delay(true), ignored);
                          self->server_.set_option(tcp::no_delay(true), ignored);
                          self->Read(self->up_);
                          self->Read(self->down_);
                        });
  }

  // Closes both sockets and drops what is held; pending handlers finish with operation_aborted.
  void Close() {
    if (closed_) return;
    closed_ = true;
    if (counted_) link_->open.fetch_sub(1);
    dial_timer_.cancel();
    for (Pipe* p : {&up_, &down_}) {
      p->read_timer.cancel();
      p->write_timer.cancel();
    }
    error_code ignored;
    client_.shutdown(tcp::socket::shutdown_both, ignored);
    server_.shutdown(tcp::socket::shutdown_both, ignored);
    client_.close(ignored);
    server_.close(ignored);
  }

  // After a stall: held bytes go out no earlier than `not_before`.
  void Resume(Clock::time_point not_before) {
    for (Pipe* p : {&up_, &down_}) {
      p->not_before = std::max(p->not_before, not_before);
      Write(*p);
    }
  }

 private:
  struct Piece {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    Clock::time_point due;
    bool fin = false;
  };

  // One direction of this connection: from one socket, through the direction's model, to the other.
  struct Pipe {
    Pipe(tcp::socket* from, tcp::socket* to, DirectionModel* model,
         std::atomic<uint64_t>* delivered, const asio::any_io_executor& executor)
        : from(from),
          to(to),
          model(model),
          delivered(delivered),
          read_timer(executor),
          write_timer(executor) {}
    tcp::socket* from;
    tcp::socket* to;
    DirectionModel* model;
    std::atomic<uint64_t>* delivered;
    asio::steady_timer read_timer;   // waits for room in the bottleneck buffer
    asio::steady_timer write_timer;  // waits for the front piece to be due
    std::deque<Piece> queue;         // read, not yet delivered, in stream order
    size_t held_bytes = 0;
    Clock::time_point last_due;
    Clock::time_point not_before;  // nothing is delivered before (set by Restore after a stall)
    std::vector<asio::const_buffer> batch;  // the write in flight
    size_t batch_pieces = 0, batch_bytes = 0;
    bool reading = false, read_waiting = false, eof = false;
    bool writing = false, write_waiting = false, fin_sent = false;
  };

  void Read(Pipe& p) {
    if (closed_ || p.reading || p.read_waiting || p.eof) return;
    if (p.held_bytes >= p.model->max_held_bytes()) return;  // Write() calls again as it drains.
    const Clock::duration wait = p.model->WaitForRoom(Clock::now());
    if (wait.count() > 0) {
      p.read_waiting = true;
      p.read_timer.expires_after(wait);
      p.read_timer.async_wait([self = shared_from_this(), &p](error_code ec) {
        p.read_waiting = false;
        if (!ec) self->Read(p);
      });
      return;
    }
    p.reading = true;
    auto buffer = std::make_unique_for_overwrite<char[]>(kReadSize);
    char* data = buffer.get();
    p.from->async_read_some(
        asio::buffer(data, kReadSize),
        [self = shared_from_this(), &p, buffer = std::move(buffer)](
            error_code ec, size_t n) mutable { self->OnRead(p, std::move(buffer), ec, n); });
  }

  void OnRead(Pipe& p, std::unique_ptr<char[]> buffer, error_code ec, size_t n) {
    p.reading = false;
    if (closed_) return;
    if (ec && ec != asio::error::eof) return Close();
    Piece piece;
    if (ec == asio::error::eof) {
      p.eof = true;
      piece.fin = true;
    } else if (n < kSmallPiece) {
      piece.data = std::make_unique_for_overwrite<char[]>(n);
      std::copy_n(buffer.get(), n, piece.data.get());
    } else {
      piece.data = std::move(buffer);
    }
    piece.size = piece.fin ? 0 : n;
    piece.due = std::max(p.model->Send(piece.size, Clock::now()), p.last_due);
    p.last_due = piece.due;
    p.held_bytes += piece.size;
    p.queue.push_back(std::move(piece));
    Write(p);
    Read(p);
  }

  void Write(Pipe& p) {
    if (closed_ || p.writing || p.write_waiting || p.queue.empty()) return;
    if (link_->state == LinkEmulator::State::kStalled) return;  // Resume() calls again.
    const Clock::time_point now = Clock::now();
    const Clock::time_point due = std::max(p.queue.front().due, p.not_before);
    if (due > now) {
      p.write_waiting = true;
      p.write_timer.expires_at(due);
      p.write_timer.async_wait([self = shared_from_this(), &p](error_code ec) {
        p.write_waiting = false;
        if (!ec) self->Write(p);
      });
      return;
    }
    if (p.queue.front().fin) {
      p.queue.pop_front();
      p.fin_sent = true;
      error_code ignored;
      p.to->shutdown(tcp::socket::shutdown_send, ignored);
      if (up_.fin_sent && down_.fin_sent) Close();
      return;
    }
    p.batch.clear();
    p.batch_pieces = p.batch_bytes = 0;
    for (const Piece& piece : p.queue) {
      if (piece.fin || piece.due > now || p.batch_pieces == kMaxBatchPieces ||
          p.batch_bytes >= kMaxBatchBytes) {
        break;
      }
      p.batch.emplace_back(piece.data.get(), piece.size);
      ++p.batch_pieces;
      p.batch_bytes += piece.size;
    }
    p.writing = true;
    asio::async_write(*p.to, p.batch, [self = shared_from_this(), &p](error_code ec, size_t n) {
      p.writing = false;
      // Counted even when the connection closed meanwhile: the peer may have read them already.
      p.delivered->fetch_add(n, std::memory_order_relaxed);
      if (self->closed_) return;
      if (ec) return self->Close();
      p.queue.erase(p.queue.begin(), p.queue.begin() + static_cast<ptrdiff_t>(p.batch_pieces));
      p.held_bytes -= p.batch_bytes;
      self->Write(p);
      self->Read(p);
    });
  }

  const std::shared_ptr<Link> link_;
  tcp::socket client_;
  tcp::socket server_;
  asio::steady_timer dial_timer_;
  Pipe up_;
  Pipe down_;
  bool closed_ = false;
  bool counted_ = false;  // Forwarded: counted in Link::open until closed.
};

}  // namespace

// Owned by the emulator and by its pending handlers, which may outlive it on a shared thread; the
// last of them destroys it, on the I/O thread or in ~LinkEmulator, before the io_context.
struct LinkEmulator::Impl : std::enable_shared_from_this<Impl> {
  Impl(LinkProfile profile, std::chrono::milliseconds dial_timeout, uint64_t seed,
       asio::io_context& io)
      : link(std::make_shared<Link>(std::move(profile), dial_timeout, seed)), io(io) {}

  void Accept() {
    acceptor.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
      self->OnAccept(ec, std::move(socket));
    });
  }

  void OnAccept(error_code ec, tcp::socket socket) {
    if (link->stopping) return;
    if (ec) {
      // E.g. out of file descriptors: retry a little later instead of spinning.
      accept_backoff.expires_after(std::chrono::milliseconds(50));
      accept_backoff.async_wait([self = shared_from_this()](error_code) {
        if (!self->link->stopping) self->Accept();
      });
      return;
    }
    if (link->state == State::kCut) {
      error_code ignored;  // The link is down: refused at once.
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
    } else {
      std::make_shared<Connection>(link, std::move(socket))->Start();
    }
    Accept();
  }

  // On the I/O thread.
  void CloseAll() {
    std::vector<Connection*> open(link->connections.begin(), link->connections.end());
    for (Connection* c : open) c->Close();
  }

  void SetState(State state) {
    link->requested_state.store(state);
    asio::post(io, [this, self = shared_from_this(), state] {
      const State before = link->state;
      link->state = state;
      if (state == State::kCut) CloseAll();
      if (state == State::kUp && before == State::kStalled) {
        const Clock::time_point not_before = Clock::now() + link->profile.one_way_delay;
        std::vector<Connection*> open(link->connections.begin(), link->connections.end());
        for (Connection* c : open) c->Resume(not_before);
      }
    });
  }

  // Closes the listener and every connection; on the I/O thread.
  void Stop() {
    link->stopping = true;
    error_code ignored;
    acceptor.close(ignored);
    accept_backoff.cancel();
    CloseAll();
  }

  const std::shared_ptr<Link> link;  // Also held by every connection.
  asio::io_context& io;
  std::string address;
  int port = 0;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};
};

absl::StatusOr<std::unique_ptr<LinkEmulator>> LinkEmulator::Start(
    const std::string& listen, const std::string& forward, LinkProfile profile,
    std::chrono::milliseconds dial_timeout, std::shared_ptr<EmulatorThread> thread) {
  if (profile.rate_bits_per_second < 0 || profile.one_way_delay.count() < 0 ||
      profile.jitter.count() < 0 || profile.loss_burst.mean_interval.count() < 0 ||
      profile.loss_burst.duration.count() < 0) {
    return absl::InvalidArgumentError("link profile '" + profile.name +
                                      "' has a negative rate, delay, jitter or loss burst");
  }
  if (dial_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a dial timeout of ", dial_timeout.count(), " ms: it must be positive"));
  }
  STRAIT_ASSIGN_OR_RETURN(auto forward_to, SplitHostPort(forward));
  if (thread == nullptr) thread = std::make_shared<EmulatorThread>();
  auto impl = std::make_shared<Impl>(std::move(profile), dial_timeout, std::random_device{}(),
                                     thread->io());

  error_code ec;
  tcp::resolver resolver(impl->io);
  impl->link->forward =
      resolver.resolve(forward_to.first, forward_to.second, tcp::resolver::numeric_service, ec);
  if (ec || impl->link->forward.empty()) {
    return absl::InvalidArgumentError("forward address '" + forward +
                                      "' does not resolve: " + ec.message());
  }
  STRAIT_RETURN_IF_ERROR(Listen(impl->acceptor, listen));
  const tcp::endpoint bound = impl->acceptor.local_endpoint(ec);
  if (ec) return absl::UnavailableError("cannot listen on " + listen + ": " + ec.message());
  impl->port = bound.port();
  impl->address = EndpointString(bound);

  impl->Accept();
  return std::unique_ptr<LinkEmulator>(new LinkEmulator(std::move(thread), std::move(impl)));
}

LinkEmulator::LinkEmulator(std::shared_ptr<EmulatorThread> thread, std::shared_ptr<Impl> impl)
    : thread_(std::move(thread)), impl_(std::move(impl)) {}

LinkEmulator::~LinkEmulator() {
  // Everything closes on the I/O thread; wait for that, so that the port is closed when this
  // returns. The handlers it aborts still hold the Impl; they run on the thread, which a last
  // owner's reset() below lets finish them before it is joined.
  auto closed = std::make_shared<std::promise<void>>();
  std::future<void> done = closed->get_future();
  asio::post(impl_->io, [impl = impl_, closed] {
    impl->Stop();
    closed->set_value();
  });
  done.wait();
  impl_.reset();
  thread_.reset();
}

std::string LinkEmulator::address() const { return impl_->address; }
int LinkEmulator::port() const { return impl_->port; }
const LinkProfile& LinkEmulator::profile() const { return impl_->link->profile; }

void LinkEmulator::Cut() { impl_->SetState(State::kCut); }
void LinkEmulator::Stall() { impl_->SetState(State::kStalled); }
void LinkEmulator::Restore() { impl_->SetState(State::kUp); }

LinkEmulator::Stats LinkEmulator::stats() const {
  const Link& link = *impl_->link;
  Stats s;
  s.bytes_up = link.bytes_up.load(std::memory_order_relaxed);
  s.bytes_down = link.bytes_down.load(std::memory_order_relaxed);
  s.connections = link.accepted.load();
  s.open_connections = link.open.load();
  s.failed_dials = link.failed_dials.load();
  s.state = link.requested_state.load();
  return s;
}

double LinkEmulator::CpuSeconds() const { return thread_->CpuSeconds(); }

const char* StateName(LinkEmulator::State state) {
  switch (state) {
    case LinkEmulator::State::kUp:
      return "up";
    case LinkEmulator::State::kCut:
      return "cut";
    case LinkEmulator::State::kStalled:
      return "stalled";
  }
  return "up";
}

}  // namespace strait::harness
