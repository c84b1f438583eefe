// `strait wan`'s link emulator on loopback: the delay and rate it delivers are within 10% of what
// was asked (the issue's own acceptance check, hence the timed assertions; medians and transfers
// long enough to be robust on a loaded 2-core machine), cut / stall / restore, byte order and
// integrity under jitter, half-close, links sharing a thread, and the `strait wan` process with its
// control socket.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/subprocess.h"
#include "harness/wan/control_server.h"
#include "harness/wan/emulator_thread.h"
#include "harness/wan/link_emulator.h"
#include "harness/wan/link_profile.h"

namespace strait::tools {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::string kStrait = std::string(STRAIT_BINARY_DIR) + "/tools/strait";

harness::LinkProfile Custom(double rate, std::chrono::microseconds delay,
                            std::chrono::microseconds jitter = {}) {
  harness::LinkProfile p;
  p.name = "custom";
  p.rate_bits_per_second = rate;
  p.one_way_delay = delay;
  p.jitter = jitter;
  return p;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A blocking client socket to 127.0.0.1:`port`, or -1. Reads time out after `timeout`.
int Dial(int port, std::chrono::seconds timeout = std::chrono::seconds(10)) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadExactly(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = read(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// True when the peer closed `fd` (EOF or reset) within its read timeout; false on data or timeout.
bool ClosedByPeer(int fd) {
  char byte;
  const ssize_t n = read(fd, &byte, 1);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

std::string RandomBytes(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(size, '\0');
  for (size_t i = 0; i + 8 <= size; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

// A loopback server that runs `handler` on a thread of its own for every connection. The
// destructor shuts every socket down and joins every thread.
class TestServer {
 public:
  explicit TestServer(std::function<void(int)> handler) : handler_(std::move(handler)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t size = sizeof(a);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &size);
    port_ = ntohs(a.sin_port);
    listen(listener_, 16);
    accept_thread_ = std::thread([this] {
      while (true) {
        const int fd = accept(listener_, nullptr, nullptr);
        if (fd < 0) return;
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        std::lock_guard lock(mu_);
        fds_.push_back(fd);
        threads_.emplace_back([this, fd] { handler_(fd); });
      }
    });
  }
  ~TestServer() {
    shutdown(listener_, SHUT_RDWR);
    accept_thread_.join();
    close(listener_);
    std::lock_guard lock(mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (std::thread& t : threads_) t.join();
    for (int fd : fds_) close(fd);
  }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<void(int)> handler_;
  int listener_ = -1;
  int port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

// Sends back what it reads; passes the client's half-close on.
void Echo(int fd) {
  std::vector<char> buffer(256 << 10);
  while (true) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n <= 0) break;
    if (!WriteAll(fd, buffer.data(), static_cast<size_t>(n))) break;
  }
  shutdown(fd, SHUT_WR);
}

// Keeps what one connection sends, with the times of its first and last reads.
struct Recording {
  std::mutex mu;
  std::string data;
  size_t first_read = 0;
  Clock::time_point first, last;
  bool eof = false;

  void Record(int fd) {
    std::vector<char> buffer(1 << 20);
    while (true) {
      const ssize_t n = read(fd, buffer.data(), buffer.size());
      const Clock::time_point now = Clock::now();
      std::lock_guard lock(mu);
      if (n <= 0) {
        eof = true;
        return;
      }
      if (data.empty()) {
        first = now;
        first_read = static_cast<size_t>(n);
      }
      last = now;
      data.append(buffer.data(), static_cast<size_t>(n));
    }
  }
  size_t size() {
    std::lock_guard lock(mu);
    return data.size();
  }
  // Waits until `bytes` arrived (or the connection ended); false on timeout.
  bool WaitFor(size_t bytes, std::chrono::seconds timeout) {
    const Clock::time_point end = Clock::now() + timeout;
    while (Clock::now() < end) {
      {
        std::lock_guard lock(mu);
        if (data.size() >= bytes || eof) return data.size() >= bytes;
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
    return false;
  }
};

std::unique_ptr<harness::LinkEmulator> StartLink(const TestServer& server,
                                                 const harness::LinkProfile& profile) {
  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> link =
      harness::LinkEmulator::Start("127.0.0.1:0", server.address(), profile);
  EXPECT_TRUE(link.ok()) << link.status();
  return link.ok() ? std::move(*link) : nullptr;
}

// One small message there and back through an echo server: the round trip is twice the delay.
TEST(WanLinkTest, RoundTripIsTwiceTheDelay) {
  TestServer echo(Echo);
  auto link = StartLink(echo, Custom(0, milliseconds(20)));
  ASSERT_NE(link, nullptr);
  const int fd = Dial(link->port());
  ASSERT_GE(fd, 0);
  std::vector<double> rtts;
  char message[100] = "ping";
  char answer[sizeof(message)];
  for (int i = 0; i < 12; ++i) {
    const Clock::time_point start = Clock::now();
    ASSERT_TRUE(WriteAll(fd, message, sizeof(message)));
    ASSERT_TRUE(ReadExactly(fd, answer, sizeof(answer)));
    if (i > 0) rtts.push_back(Seconds(Clock::now() - start) * 1e3);  // The first sets up.
  }
  close(fd);
  std::sort(rtts.begin(), rtts.end());
  const double median = rtts[rtts.size() / 2];
  std::printf("round trip through 20 ms one-way: median %.2f ms (min %.2f, max %.2f)\n", median,
              rtts.front(), rtts.back());
  EXPECT_NEAR(median, 40.0, 4.0);
  EXPECT_GE(rtts.front(), 40.0);  // Never faster than the link.
}

// A few seconds' worth one way; the rate counts from the first byte received to the last, so the
// delay does not.
void ExpectRate(double rate, size_t bytes) {
  Recording recording;
  TestServer sink([&](int fd) { recording.Record(fd); });
  auto link = StartLink(sink, Custom(rate, milliseconds(5)));
  ASSERT_NE(link, nullptr);
  const int fd = Dial(link->port());
  ASSERT_GE(fd, 0);
  const std::string payload = RandomBytes(bytes, 1);
  ASSERT_TRUE(WriteAll(fd, payload.data(), payload.size()));
  ASSERT_TRUE(recording.WaitFor(bytes, std::chrono::seconds(60)));
  close(fd);
  std::lock_guard lock(recording.mu);
  const double measured = (recording.data.size() - recording.first_read) * 8 /
                          Seconds(recording.last - recording.first);
  std::printf("rate %.0f Mbit/s asked, %.2f Mbit/s measured over %zu MiB\n", rate / 1e6,
              measured / 1e6, bytes >> 20);
  EXPECT_NEAR(measured, rate, 0.1 * rate);
  EXPECT_TRUE(recording.data == payload);
  EXPECT_GT(link->CpuSeconds(), 0.0) << "forwarding MiBs took no CPU time on the link's thread";
}

TEST(WanLinkTest, RateIsTheOneAskedFor50Mbit) { ExpectRate(50e6, 8 << 20); }
TEST(WanLinkTest, RateIsTheOneAskedFor200Mbit) { ExpectRate(200e6, 32 << 20); }

// Waits (at most 10 s) until `done` holds.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(milliseconds(10));
  return done();
}

bool Echoes(int fd) {
  char message[16] = "hello", answer[sizeof(message)];
  return WriteAll(fd, message, sizeof(message)) && ReadExactly(fd, answer, sizeof(answer)) &&
         std::memcmp(message, answer, sizeof(message)) == 0;
}

TEST(WanLinkTest, CutClosesConnectionsUntilRestored) {
  TestServer echo(Echo);
  auto link = StartLink(echo, Custom(0, milliseconds(1)));
  ASSERT_NE(link, nullptr);
  const int before = Dial(link->port(), std::chrono::seconds(5));
  ASSERT_TRUE(Echoes(before));
  EXPECT_EQ(link->stats().open_connections, 1u);

  link->Cut();
  EXPECT_TRUE(ClosedByPeer(before));
  close(before);
  ASSERT_TRUE(Eventually([&] { return link->stats().open_connections == 0; }));
  EXPECT_EQ(link->stats().state, harness::LinkEmulator::State::kCut);
  const int during = Dial(link->port(), std::chrono::seconds(5));
  ASSERT_GE(during, 0);  // The kernel accepts; the emulator closes it at once.
  EXPECT_TRUE(ClosedByPeer(during));
  close(during);

  link->Restore();
  ASSERT_TRUE(Eventually([&] { return link->stats().state == harness::LinkEmulator::State::kUp; }));
  const int after = Dial(link->port(), std::chrono::seconds(5));
  EXPECT_TRUE(Echoes(after));
  close(after);
  EXPECT_EQ(link->stats().connections, 2u);  // The refused one is not counted.
}

TEST(WanLinkTest, StallHoldsBytesAndRestoreDeliversThemAll) {
  Recording recording;
  TestServer sink([&](int fd) { recording.Record(fd); });
  auto link = StartLink(sink, Custom(0, milliseconds(5)));
  ASSERT_NE(link, nullptr);
  const int fd = Dial(link->port());
  ASSERT_GE(fd, 0);
  const std::string first = RandomBytes(64 << 10, 2);
  ASSERT_TRUE(WriteAll(fd, first.data(), first.size()));
  ASSERT_TRUE(recording.WaitFor(first.size(), std::chrono::seconds(10)));

  link->Stall();
  std::this_thread::sleep_for(milliseconds(50));  // The stall takes effect on the I/O thread.
  const std::string held = RandomBytes(2 << 20, 3);
  ASSERT_TRUE(WriteAll(fd, held.data(), held.size()));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(recording.size(), first.size()) << "bytes crossed a stalled link";
  EXPECT_EQ(link->stats().state, harness::LinkEmulator::State::kStalled);

  const Clock::time_point restored = Clock::now();
  link->Restore();
  ASSERT_TRUE(recording.WaitFor(first.size() + held.size(), std::chrono::seconds(10)));
  close(fd);
  std::lock_guard lock(recording.mu);
  EXPECT_GE(recording.last - restored, milliseconds(5));  // A one-way delay after the restore.
  EXPECT_TRUE(recording.data == first + held) << "held bytes lost or reordered";
}

// Jitter reorders nothing: 4 MiB of random bytes go there and back through an echo server intact,
// and the client's half-close comes back as the end of the stream.
TEST(WanLinkTest, JitterKeepsOrderAndIntegrity) {
  TestServer echo(Echo);
  auto link = StartLink(echo, Custom(0, milliseconds(5), milliseconds(5)));
  ASSERT_NE(link, nullptr);
  const int fd = Dial(link->port(), std::chrono::seconds(30));
  ASSERT_GE(fd, 0);
  const std::string payload = RandomBytes(4 << 20, 4);
  std::thread writer([&] {
    EXPECT_TRUE(WriteAll(fd, payload.data(), payload.size()));
    shutdown(fd, SHUT_WR);
  });
  std::string echoed(payload.size(), '\0');
  const bool read = ReadExactly(fd, echoed.data(), echoed.size());
  writer.join();
  EXPECT_TRUE(read);
  EXPECT_TRUE(echoed == payload) << "bytes reordered or changed";
  EXPECT_TRUE(ClosedByPeer(fd)) << "the half-close did not come back";
  close(fd);
  EXPECT_TRUE(Eventually([&] {
    const harness::LinkEmulator::Stats s = link->stats();
    return s.open_connections == 0 && s.bytes_up == payload.size() &&
           s.bytes_down == payload.size();
  }));
}

// Links on one shared thread (as a federation's are in `strait bench e2e`) forward independently,
// and destroying one closes its listener and its connections at once while the others carry on.
TEST(WanLinkTest, LinksSharingAThreadForwardAndCloseIndependently) {
  TestServer echo(Echo);
  auto thread = std::make_shared<harness::EmulatorThread>();
  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> a =
      harness::LinkEmulator::Start("127.0.0.1:0", echo.address(), Custom(0, milliseconds(2)),
                                   harness::LinkEmulator::kDialTimeout, thread);
  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> b =
      harness::LinkEmulator::Start("127.0.0.1:0", echo.address(), Custom(0, milliseconds(5)),
                                   harness::LinkEmulator::kDialTimeout, thread);
  ASSERT_TRUE(a.ok() && b.ok());
  const int to_a = Dial((*a)->port(), std::chrono::seconds(5));
  const int to_b = Dial((*b)->port(), std::chrono::seconds(5));
  EXPECT_TRUE(Echoes(to_a));
  EXPECT_TRUE(Echoes(to_b));

  const int port_a = (*a)->port();
  a->reset();  // With its connection open.
  EXPECT_TRUE(ClosedByPeer(to_a));
  EXPECT_EQ(Dial(port_a), -1) << "the listener of a destroyed link still accepts";
  EXPECT_TRUE(Echoes(to_b));
  EXPECT_GT(thread->CpuSeconds(), 0.0);
  close(to_a);
  close(to_b);
}

TEST(WanLinkTest, RejectsBadAddresses) {
  EXPECT_EQ(harness::LinkEmulator::Start("127.0.0.1", "127.0.0.1:1", Custom(0, {})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      harness::LinkEmulator::Start("127.0.0.1:0", "127.0.0.1:99999", Custom(0, {})).status().code(),
      absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> v6 =
      harness::LinkEmulator::Start("[::1]:0", "127.0.0.1:1", Custom(0, {}));
  if (v6.ok()) {  // Where the machine has IPv6 loopback.
    EXPECT_THAT((*v6)->address(), ::testing::StartsWith("[::1]:"));
  }
}

// A TCP socket bound to a free port of 127.0.0.1 (-1 on failure); its port in *port.
int BoundLoopbackSocket(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// Dials `link` once: the emulator must close the client (within the client's 5 s read timeout)
// and count a failed dial, not a connection.
void ExpectAConnectionClosedAsAFailedDial(const harness::LinkEmulator& link) {
  const int fd = Dial(link.port(), std::chrono::seconds(5));
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ClosedByPeer(fd));
  EXPECT_TRUE(Eventually([&] { return link.stats().failed_dials == 1; }));
  EXPECT_EQ(link.stats().connections, 0u);
  close(fd);
}

TEST(WanLinkTest, ADialThatFailsClosesTheClientAndIsCounted) {
  // A port bound but not listening: the forward dial is refused, and no one else can take it.
  int port = 0;
  const int reserved = BoundLoopbackSocket(&port);
  ASSERT_GE(reserved, 0);
  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> link = harness::LinkEmulator::Start(
      "127.0.0.1:0", "127.0.0.1:" + std::to_string(port), Custom(0, milliseconds(1)));
  ASSERT_TRUE(link.ok()) << link.status();
  ExpectAConnectionClosedAsAFailedDial(**link);
  EXPECT_THAT(harness::StatsJson((*link)->stats()), ::testing::HasSubstr(R"("failed_dials":1)"));
  close(reserved);
}

TEST(WanLinkTest, ADialThatGetsNoAnswerTimesOutClosesTheClientAndIsCounted) {
  // A listener whose accept queue is full: Linux drops further SYNs, so a dial to it neither
  // succeeds nor fails until the kernel gives up (minutes), as with a blackholed gateway.
  int port = 0;
  const int full = BoundLoopbackSocket(&port);
  ASSERT_GE(full, 0);
  ASSERT_EQ(listen(full, 0), 0);
  const int queued = Dial(port);  // Fills the queue of one; never accepted.
  ASSERT_GE(queued, 0);
  const std::string forward = "127.0.0.1:" + std::to_string(port);

  EXPECT_EQ(harness::LinkEmulator::Start("127.0.0.1:0", forward, Custom(0, {}), milliseconds(0))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  {  // With a long timeout the dial just hangs: the client stays open and nothing is counted.
    absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> patient = harness::LinkEmulator::Start(
        "127.0.0.1:0", forward, Custom(0, {}), std::chrono::minutes(1));
    ASSERT_TRUE(patient.ok()) << patient.status();
    const int fd = Dial((*patient)->port(), std::chrono::seconds(1));
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(ClosedByPeer(fd));  // The read timed out after 1 s.
    EXPECT_EQ((*patient)->stats().failed_dials, 0u);
    EXPECT_EQ((*patient)->stats().connections, 0u);
    close(fd);
  }
  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> link =
      harness::LinkEmulator::Start("127.0.0.1:0", forward, Custom(0, {}), milliseconds(300));
  ASSERT_TRUE(link.ok()) << link.status();
  // Closed by the dial timeout (300 ms), well before the client's 5 s read timeout.
  ExpectAConnectionClosedAsAFailedDial(**link);
  close(queued);
  close(full);
}

// One line of the control protocol: sends `command`, returns the answer without its newline.
std::string Control(int fd, const std::string& command) {
  const std::string line = command + "\n";
  if (!WriteAll(fd, line.data(), line.size())) return "(write failed)";
  std::string answer;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') answer += c;
  return answer;
}

// Waits for `pattern` (with one group: a number) in the log; 0 on timeout.
int NumberFromLog(const std::string& log_file, const std::string& pattern) {
  const std::regex re(pattern);
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(log_file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string log = text.str();
    std::smatch m;
    if (std::regex_search(log, m, re)) return std::stoi(m[1]);
    std::this_thread::sleep_for(milliseconds(50));
  }
  return 0;
}

TEST(WanLinkTest, StraitWanProcess) {
  const std::string strait = kStrait;
  TestServer echo(Echo);
  harness::TempDir dir;
  const std::string log = dir.File("wan.log");
  harness::Process wan({strait, "wan", "--listen", "127.0.0.1:0", "--forward", echo.address(),
                        "--rate", "1gbit", "--delay", "1ms", "--control", "127.0.0.1:0"},
                       log);
  const int port = NumberFromLog(log, "strait wan: 127\\.0\\.0\\.1:(\\d+) -> " + echo.address() +
                                          ", custom: 1 Gbit/s, 1 ms one-way\n");
  ASSERT_GT(port, 0) << wan.LogTail();
  const int control_port = NumberFromLog(log, "control on 127\\.0\\.0\\.1:(\\d+)");
  ASSERT_GT(control_port, 0) << wan.LogTail();

  const int control = Dial(control_port);
  ASSERT_GE(control, 0);
  const int client = Dial(port);
  ASSERT_TRUE(Echoes(client));
  EXPECT_EQ(Control(control, "cut"), "ok");
  EXPECT_TRUE(ClosedByPeer(client));
  close(client);
  EXPECT_THAT(Control(control, "stats"), ::testing::HasSubstr(R"("state":"cut")"));
  EXPECT_EQ(Control(control, "restore"), "ok");
  EXPECT_THAT(Control(control, "fly"), ::testing::StartsWith("error: unknown command 'fly'"));
  // The restore has been handled on the emulator's thread by now, or very soon.
  std::this_thread::sleep_for(milliseconds(100));
  const int again = Dial(port);
  EXPECT_TRUE(Echoes(again));
  close(again);
  // Counted as each write completes, which may be a moment after the client read the bytes.
  const std::regex expected(R"(\{"bytes_up":32,"bytes_down":32,"connections":2,)"
                            R"("open_connections":[01],"failed_dials":0,"state":"up"\})");
  std::string stats;
  for (int i = 0; i < 100 && !std::regex_match(stats = Control(control, "stats"), expected); ++i) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(std::regex_match(stats, expected)) << stats;
  close(control);

  wan.Kill(SIGUSR1);  // Cut and restored on signals too.
  EXPECT_EQ(NumberFromLog(log, "strait wan: link cut \\(SIGUSR(1)\\)"), 1) << wan.LogTail();
  wan.Kill(SIGUSR2);
  EXPECT_EQ(NumberFromLog(log, "strait wan: link restored \\(SIGUSR(2)\\)"), 2) << wan.LogTail();

  wan.Kill(SIGTERM);
  EXPECT_EQ(wan.Wait(std::chrono::seconds(10)), 0) << wan.LogTail();
  EXPECT_THAT(wan.LogTail(),
              ::testing::HasSubstr("strait wan: 32 bytes up, 32 bytes down, 2 connections"));
}

TEST(WanLinkTest, StraitWanRejectsBadInput) {
  const std::string strait = kStrait;
  harness::TempDir dir;
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  int run = 0;
  for (const Case& c :
       {Case{{"--profile", "metro"}, "--forward HOST:PORT is required"},
        Case{{"--forward", "127.0.0.1:1"}, "--profile NAME"},
        Case{{"--forward", "127.0.0.1:1", "--profile", "moon"}, "unknown link profile"},
        Case{{"--forward", "127.0.0.1:1", "--profile", "metro", "--rate", "1gbit"}, "not both"},
        Case{{"--forward", "127.0.0.1:1", "--rate", "fast"}, "e.g. 500kbit"},
        Case{{"--forward", "127.0.0.1:1", "--delay", "5"}, "e.g. 300us"},
        Case{{"--forward", "127.0.0.1:1", "--profile", "metro", "--dial-timeout", "0"},
             "must be positive"},
        Case{{"--forward", "127.0.0.1:1", "--profile", "metro", "--dial-timeout", "soon"},
             "--dial-timeout soon"},
        // A malformed command line is a usage error too (not CLI11's own codes, 105 and up).
        Case{{"--forward", "127.0.0.1:1", "--bogus"}, "--bogus"}}) {
    std::vector<std::string> argv = {strait, "wan"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    harness::Process p(argv, dir.File("bad" + std::to_string(run++) + ".log"));
    EXPECT_EQ(p.Wait(std::chrono::seconds(10)), 2) << c.args.back();
    EXPECT_THAT(p.LogTail(), ::testing::HasSubstr(c.message)) << c.args.back();
  }
}

}  // namespace
}  // namespace strait::tools
